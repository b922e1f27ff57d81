//! varroa-gateway: the gRPC server (mutual TLS) the mites dial; keeps their state in JetStream and pushes desired configuration down.
