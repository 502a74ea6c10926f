package event

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strings"
	"time"
)

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

// Describe says what is wrong with data that did not decode, without any
// of its content: a bad event may carry anything, secrets included, and
// Go's JSON and time errors quote the values they reject. It names the
// sentinel and, for JSON errors, the byte offset or the field.
func Describe(err error) string {
	if err == nil {
		return ""
	}
	class := "error"
	for _, s := range []error{ErrTooLarge, ErrUnsupportedVersion, ErrUnknownType, ErrMalformed, ErrInvalid, ErrInvalidSubject} {
		if errors.Is(err, s) {
			class = s.Error()
			break
		}
	}
	var syntax *json.SyntaxError
	var typ *json.UnmarshalTypeError
	var tm *time.ParseError
	switch {
	case errors.As(err, &syntax):
		return fmt.Sprintf("%s: JSON syntax error at byte %d", class, syntax.Offset)
	case errors.As(err, &typ):
		// Field is a path of this package's field names; Value is a JSON
		// kind ("string", "number"), not the value.
		return fmt.Sprintf("%s: field %s: JSON %s where %s belongs", class, typ.Field, typ.Value, typ.Type)
	case errors.As(err, &tm):
		return class + ": a time is not in RFC 3339 format"
	case errors.Is(err, io.ErrUnexpectedEOF):
		return class + ": truncated JSON"
	}
	return class
}

// Loggable returns the ID and type of an event that failed to decode, as
// far as they are safe to log: each only when it has the syntax this
// package gives it (a hex ID of idLen digits, a lower-case type word),
// since anything else may be content.
func Loggable(e Event) (id string, typ Type) {
	if len(e.ID) == idLen && strings.Trim(e.ID, "0123456789abcdef") == "" {
		id = e.ID
	}
	if checkType(e.Type) == nil {
		typ = e.Type
	}
	return id, typ
}
