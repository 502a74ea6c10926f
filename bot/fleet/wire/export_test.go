package wire

// SignedInput is what a chunk's seal covers, context first, for the tests
// that seal headers Seal would never make (a sealer that lies about its
// chunks).
func SignedInput(h Header) []byte { return append([]byte(SigningContext), h.signed()...) }
