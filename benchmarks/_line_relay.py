"""The baseline of benchmark P3: a minimal relay written the obvious way with the standard
library. It runs a stream-json CLI, and for each request on stdin sends the CLI a user message,
turns each text delta the CLI prints into an `item/agentMessage/delta` notification (json.loads
in, json.dumps out, one write + flush per message, as a streaming relay must) and ends with
`turn/completed`.

Usage: _line_relay.py <cli> [cli args...]
"""

import json
import subprocess
import sys


def main() -> None:
    cli = subprocess.Popen(sys.argv[1:], stdin=subprocess.PIPE, stdout=subprocess.PIPE)
    assert cli.stdin is not None and cli.stdout is not None
    out = sys.stdout
    ids = {"threadId": "thread-1", "turnId": "turn-1", "itemId": "item-1"}
    for request in sys.stdin:
        text = json.loads(request)["params"]["text"]
        user = {
            "type": "user",
            "message": {"role": "user", "content": [{"type": "text", "text": text}]},
        }
        cli.stdin.write(json.dumps(user).encode() + b"\n")
        cli.stdin.flush()
        for line in cli.stdout:
            message = json.loads(line)
            kind = message.get("type")
            if kind == "stream_event":
                event = message["event"]
                delta = event.get("delta") or {}
                if event.get("type") == "content_block_delta" and delta.get("type") == "text_delta":
                    params = {**ids, "delta": delta["text"]}
                    note = {"jsonrpc": "2.0", "method": "item/agentMessage/delta", "params": params}
                    out.write(json.dumps(note) + "\n")
                    out.flush()
            elif kind == "result":
                turn = {"id": ids["turnId"], "status": "completed", "items": []}
                note = {"jsonrpc": "2.0", "method": "turn/completed", "params": {"turn": turn}}
                out.write(json.dumps(note) + "\n")
                out.flush()
                break
    cli.stdin.close()
    cli.wait()


if __name__ == "__main__":
    main()
