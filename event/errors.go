package event

import "errors"

// Sentinel errors. Every error returned by this package wraps exactly one of
// them, so a consumer can branch with errors.Is and decide between retrying,
// dead-lettering and dropping a message.
var (
	// ErrMalformed marks bytes that can never become a valid event: not JSON,
	// truncated, a required envelope field missing or invalid, or a payload
	// that does not match its type. Redelivery cannot help; dead-letter it.
	ErrMalformed = errors.New("event: malformed")

	// ErrUnsupportedVersion marks an envelope whose major version is newer
	// than [Version]. A newer consumer may understand it, so dead-letter it
	// rather than drop it.
	ErrUnsupportedVersion = errors.New("event: unsupported version")

	// ErrUnknownType marks a well-formed envelope of a type this build does
	// not know, typically from a newer agent. [Decode] returns the envelope
	// alongside it so it can be logged.
	ErrUnknownType = errors.New("event: unknown type")

	// ErrTooLarge marks an encoded event above [MaxSize]; [Decode] rejects
	// such data before parsing it.
	ErrTooLarge = errors.New("event: too large")

	// ErrInvalid marks an event, name or reference rejected while building
	// or encoding an event; it is a programming or configuration error on
	// the producing side.
	ErrInvalid = errors.New("event: invalid")

	// ErrInvalidSubject marks a subject that does not follow the scheme
	// described in the package documentation.
	ErrInvalidSubject = errors.New("event: invalid subject")
)
