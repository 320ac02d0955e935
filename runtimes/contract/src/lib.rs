//! The runtime contract suite lives in `tests/`: the same scenarios (a
//! scripted model, the same tools, plugins and stores) run against every
//! runtime, which must give a byte-identical session log.
