//! varroa-mite: the sidecar next to each Jenkins controller; observes and configures Jenkins and keeps one gRPC stream to the gateway.
