//! The control link's shared shapes: the gRPC protocol between mite and gateway, and the JetStream key-value entries (varroa_mites, varroa_desired).
