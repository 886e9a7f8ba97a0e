/** Newline-delimited framing for threadline's stdout: bytes in, complete lines out. */

const NEWLINE = 0x0a;
const CARRIAGE_RETURN = 0x0d;

/**
 * Splits a byte stream into lines. Lines are cut on the byte `\n` *before* decoding, so a
 * multi-byte UTF-8 character split across chunks is decoded whole (`\n` never occurs inside a
 * UTF-8 sequence). A trailing `\r` is dropped. Invalid UTF-8 becomes U+FFFD.
 */
export class LineSplitter {
  private pending: Buffer[] = [];
  private readonly decoder = new TextDecoder("utf-8", { fatal: false, ignoreBOM: true });

  /** Feeds one chunk; returns the lines it completed (possibly none). */
  push(chunk: Uint8Array): string[] {
    const buf = Buffer.isBuffer(chunk)
      ? chunk
      : Buffer.from(chunk.buffer, chunk.byteOffset, chunk.byteLength);
    const lines: string[] = [];
    let start = 0;
    for (;;) {
      const nl = buf.indexOf(NEWLINE, start);
      if (nl === -1) break;
      const piece = buf.subarray(start, nl);
      if (this.pending.length > 0) {
        this.pending.push(piece);
        lines.push(this.decode(Buffer.concat(this.pending)));
        this.pending = [];
      } else {
        lines.push(this.decode(piece));
      }
      start = nl + 1;
    }
    if (start < buf.length) {
      // Copy: the caller may reuse its buffer.
      this.pending.push(Buffer.from(buf.subarray(start)));
    }
    return lines;
  }

  /** Ends the stream: returns the unterminated last line, if any. */
  end(): string[] {
    if (this.pending.length === 0) return [];
    const rest = Buffer.concat(this.pending);
    this.pending = [];
    return rest.length > 0 ? [this.decode(rest)] : [];
  }

  private decode(line: Buffer): string {
    const end =
      line.length > 0 && line[line.length - 1] === CARRIAGE_RETURN ? line.length - 1 : line.length;
    return this.decoder.decode(line.subarray(0, end));
  }
}
