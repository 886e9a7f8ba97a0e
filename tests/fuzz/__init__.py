"""Protocol fuzzing: generated and mutated input lines against one long-lived threadline process,
each answer checked against an independent model of the wire rules (see `oracle`)."""
