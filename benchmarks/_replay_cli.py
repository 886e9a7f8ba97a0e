"""A stand-in for `claude` in stream-json mode that replays a recording of the real CLI's
stdout (benchmark P3): for every user message on stdin it writes the whole recording to
stdout at once; a control request gets a success response; stdin EOF ends it.

Usage: _replay_cli.py <recording.jsonl> [claude's flags, ignored]
"""

import json
import sys


def main() -> None:
    with open(sys.argv[1], "rb") as fh:
        recording = fh.read()
    out = sys.stdout.buffer
    for line in sys.stdin.buffer:
        message = json.loads(line)
        if message.get("type") == "control_request":
            response = {"subtype": "success", "request_id": message.get("request_id")}
            out.write(json.dumps({"type": "control_response", "response": response}).encode())
            out.write(b"\n")
        elif message.get("type") == "user":
            out.write(recording)
        out.flush()


if __name__ == "__main__":
    main()
