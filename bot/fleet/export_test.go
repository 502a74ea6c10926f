package fleet

import (
	"bytes"
	"encoding/gob"
)

// What the attack tests need to build answers as a forger would: the
// answer's fields and its encoding are the package's, not secrets.

type Answer = answer

// Encode is encode.
func Encode(a Answer) ([]byte, error) { return encode(a) }

// RequestOp reads a request's operation, as a rogue subscriber would.
func RequestOp(data []byte) (string, error) {
	r, err := decodeRequest(data)
	return r.Op, err
}

// NewRequest is a request of op, with a nonce, as the client sends it.
func NewRequest(op string) ([]byte, error) {
	r, err := newRequest(op)
	if err != nil {
		return nil, err
	}
	return marshalRequest(r)
}

// Ops.
const (
	OpClusters  = opClusters
	OpCluster   = opCluster
	OpIncidents = opIncidents
	OpStatus    = opStatus
	OpStates    = opStates
)

// Sizes is the size of l's answer to op, as gob and as it travels
// (gzip).
func Sizes(l Local, op string) (gobBytes, wireBytes int, err error) {
	a, err := answerFrom(l, request{Op: op})
	if err != nil {
		return 0, 0, err
	}
	var buf bytes.Buffer
	if err := gob.NewEncoder(&buf).Encode(a); err != nil {
		return 0, 0, err
	}
	data, err := encode(a)
	return buf.Len(), len(data), err
}
