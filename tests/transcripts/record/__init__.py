"""The recorder behind `scripts/record-transcripts`: runs the pinned CLIs against the fakes in
tests/fakes and writes what the replay tests read into tests/transcripts/<cli>/."""
