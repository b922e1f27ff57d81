//! A stand-in for Jenkins in tests and the demo: the documented HTTP endpoints the mite uses, with Jenkins' status codes, headers and payloads, and fault switches.
