package audit

import (
	"context"
	"crypto/ed25519"
	"errors"
	"fmt"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/nats-io/nkeys"

	"github.com/hcpbot/hcpbot/event"
	"github.com/hcpbot/hcpbot/seal"
)

// VerifyOptions says what Verify trusts.
type VerifyOptions struct {
	// TrustedKeys are the public nkeys whose signatures the records on
	// bot subjects (event.AuditSubject) must carry. Empty: signatures are
	// not checked. Records on an agent's subject (event.AgentAuditSubject)
	// are never signed: NATS lets only that agent write there.
	TrustedKeys []string
}

// ProblemKind is what is wrong with a record.
type ProblemKind string

// The problems Verify reports.
const (
	// ProblemBrokenLink: the record names its predecessor's sequence but
	// not that message's digest (it changed, or the record was made up),
	// or names none although the subject had records before it.
	ProblemBrokenLink ProblemKind = "broken link"
	// ProblemGap: the named predecessor is missing, or is not the last
	// record of the subject before this one (records were removed, or
	// the chain forked).
	ProblemGap ProblemKind = "gap"
	// ProblemUnsigned: a record on a bot subject without a signature
	// (only when VerifyOptions.TrustedKeys are given).
	ProblemUnsigned ProblemKind = "unsigned"
	// ProblemBadSignature: signed by a key that is not trusted, or the
	// signature does not match the record.
	ProblemBadSignature ProblemKind = "bad signature"
	// ProblemMisplaced: a record on a bot subject that is not the subject
	// of its source (a record copied onto another subject), or on an
	// agent's subject of another source or of a kind agents do not write.
	ProblemMisplaced ProblemKind = "misplaced"
	// ProblemUnchained: a record without chain fields after its subject's
	// chain began, or on a bot subject after any bot subject's did.
	ProblemUnchained ProblemKind = "unchained"
	// ProblemUndecodable: a message that is no audit record.
	ProblemUndecodable ProblemKind = "undecodable"
)

// Problem is one finding of Verify.
type Problem struct {
	Seq     uint64 // stream sequence of the record
	Subject string
	Kind    ProblemKind
	Detail  string
}

func (p Problem) String() string {
	return fmt.Sprintf("seq %d %s: %s: %s", p.Seq, p.Subject, p.Kind, p.Detail)
}

// MaxReportedProblems bounds Report.Problems; ProblemCount counts them all.
const MaxReportedProblems = 100

// Report is what Verify found.
type Report struct {
	// Records and Subjects read; FirstSeq is the stream's first sequence
	// when the verification began (older records aged out), LastSeq the
	// last one verified (0 for an empty stream).
	Records, Subjects int
	FirstSeq, LastSeq uint64
	// Legacy counts the records written before the trail was chained
	// (before the first chained record of their subject).
	Legacy int
	// AgedOut counts the subjects whose oldest record names a predecessor
	// that aged out of the stream: expected, not a problem.
	AgedOut int
	// Signed counts the records whose signature verified with a trusted
	// key; SignaturesChecked says whether keys were given at all.
	Signed            int
	SignaturesChecked bool
	// Problems are the first MaxReportedProblems, in stream order.
	Problems     []Problem
	ProblemCount int
	// Started and Took say when the verification ran.
	Started time.Time
	Took    time.Duration
}

// OK is true when nothing is wrong.
func (r Report) OK() bool { return r.ProblemCount == 0 }

// firstSeqRefresh bounds how often a verification asks the stream for its
// first sequence again (see verification.agedOut).
const firstSeqRefresh = time.Second

// Verify reads the whole trail, oldest first, and checks each subject's
// chain and, with opts.TrustedKeys, the signatures of the bot's records.
// It keeps only the last record of each subject in memory. An error means
// the trail could not be read (or a trusted key is not a public nkey);
// what is wrong with the trail is in the Report.
func (l *Log) Verify(ctx context.Context, opts VerifyOptions) (Report, error) {
	if l.stream == nil {
		return Report{}, errAppendOnly
	}
	v := verification{log: l, heads: map[string]*link{}}
	v.rep.Started = time.Now()
	for _, k := range opts.TrustedKeys {
		if _, err := nkeys.FromPublicKey(k); err != nil {
			return Report{}, fmt.Errorf("audit: trusted key %q: %w", k, err)
		}
		v.keys = append(v.keys, k)
	}
	v.rep.SignaturesChecked = len(v.keys) > 0
	info, err := l.stream.Info(ctx)
	if err != nil {
		return Report{}, fmt.Errorf("audit: stream info: %w", err)
	}
	v.first, v.firstAt = info.State.FirstSeq, time.Now()
	v.rep.FirstSeq = info.State.FirstSeq
	last := info.State.LastSeq
	if info.State.Msgs > 0 {
		err = l.scan(ctx, jetstream.OrderedConsumerConfig{DeliverPolicy: jetstream.DeliverAllPolicy},
			func(msg jetstream.Msg, seq uint64) bool {
				if seq > last {
					return false // appended after we looked
				}
				v.check(ctx, seq, msg.Subject(), msg.Data())
				return seq < last
			})
		if err != nil {
			return Report{}, err
		}
	}
	v.rep.Subjects = len(v.heads)
	v.rep.Took = time.Since(v.rep.Started)
	return v.rep, nil
}

// link is the last message seen on a subject.
type link struct {
	seq     uint64
	digest  string
	chained bool // a chained record was seen on the subject
}

type verification struct {
	log   *Log
	rep   Report
	heads map[string]*link
	keys  []string // trusted
	// botChained: a chained record on a bot subject was seen.
	botChained bool
	// first is the stream's first sequence as last asked, at firstAt.
	first   uint64
	firstAt time.Time
}

func (v *verification) problem(seq uint64, subject string, kind ProblemKind, format string, args ...any) {
	v.rep.ProblemCount++
	if len(v.rep.Problems) < MaxReportedProblems {
		v.rep.Problems = append(v.rep.Problems, Problem{Seq: seq, Subject: subject, Kind: kind, Detail: fmt.Sprintf(format, args...)})
	}
}

func (v *verification) check(ctx context.Context, seq uint64, subject string, data []byte) {
	v.rep.Records++
	v.rep.LastSeq = seq
	prev, seen := v.heads[subject]
	if !seen {
		prev = &link{}
		v.heads[subject] = prev
	}
	chained := v.checkRecord(ctx, seq, subject, data, prev, seen)
	// Whatever the message is, the next record on the subject must name
	// it: Append chains onto the last message, not the last good one.
	prev.seq, prev.digest, prev.chained = seq, digest(data), prev.chained || chained
}

// checkRecord reports what is wrong with one message; chained says it is
// a chained record.
func (v *verification) checkRecord(ctx context.Context, seq uint64, subject string, data []byte, prev *link, seen bool) (chained bool) {
	r, ok := decodeAt(data, seq)
	if !ok {
		v.problem(seq, subject, ProblemUndecodable, "not a JSON audit record")
		return false
	}
	_, agent := event.AgentAuditSource(subject)
	if r.Chain == 0 {
		switch {
		case prev.chained:
			v.problem(seq, subject, ProblemUnchained, "no chain fields, after the subject's chain began")
		case !agent && v.botChained:
			// Bot replicas are upgraded together: once one chains, an
			// unchained record on a fresh bot subject is made up (and
			// would otherwise pass for history).
			v.problem(seq, subject, ProblemUnchained, "no chain fields, after the bot's chain began")
		default:
			v.rep.Legacy++
		}
		return false
	}
	if !agent {
		v.botChained = true
	}
	if r.Chain != ChainVersion {
		v.problem(seq, subject, ProblemUndecodable, "unknown chain version %d", r.Chain)
		return true
	}
	v.checkLink(ctx, seq, subject, r, prev, seen)
	if agent {
		if why := misplaced(subject, r); why != "" {
			v.problem(seq, subject, ProblemMisplaced, "%s", why)
		}
		return true
	}
	if want, err := event.AuditSubject(r.Source); err != nil || want != subject {
		v.problem(seq, subject, ProblemMisplaced, "its source %q writes elsewhere", r.Source)
	}
	if len(v.keys) > 0 {
		v.checkSignature(seq, subject, r, data)
	}
	return true
}

func (v *verification) checkLink(ctx context.Context, seq uint64, subject string, r Record, prev *link, seen bool) {
	switch {
	case r.PrevSeq == 0 && !seen:
		// The subject's first record.
	case r.PrevSeq == 0:
		v.problem(seq, subject, ProblemBrokenLink, "names no predecessor, but seq %d came before it", prev.seq)
	case seen && r.PrevSeq == prev.seq:
		if r.PrevDigest != prev.digest {
			v.problem(seq, subject, ProblemBrokenLink, "predecessor seq %d has digest %.12s…, the record names %.12s…", prev.seq, prev.digest, r.PrevDigest)
		}
	case (!seen || r.PrevSeq > prev.seq) && r.PrevSeq < seq && v.agedOut(ctx, r.PrevSeq):
		// Its predecessor aged out (before or during this read), and so
		// did everything between.
		v.rep.AgedOut++
	case !seen:
		v.problem(seq, subject, ProblemGap, "names seq %d, which is missing", r.PrevSeq)
	default:
		v.problem(seq, subject, ProblemGap, "names seq %d, but the subject's previous record is seq %d", r.PrevSeq, prev.seq)
	}
}

// agedOut says whether seq is before the stream's first sequence. The
// stream is asked again (at most every firstSeqRefresh) when it seems not
// to be: on a long read, records age out behind it.
func (v *verification) agedOut(ctx context.Context, seq uint64) bool {
	if seq < v.first {
		return true
	}
	if time.Since(v.firstAt) < firstSeqRefresh {
		return false
	}
	v.firstAt = time.Now()
	if info, err := v.log.stream.Info(ctx); err == nil {
		v.first = max(v.first, info.State.FirstSeq)
	}
	return seq < v.first
}

func (v *verification) checkSignature(seq uint64, subject string, r Record, data []byte) {
	if r.Key == "" || len(r.Sig) == 0 {
		v.problem(seq, subject, ProblemUnsigned, "no signature")
		return
	}
	signed, sig, ok := signedPart(data)
	if !ok || len(sig) != ed25519.SignatureSize {
		v.problem(seq, subject, ProblemBadSignature, "signature not in the form Append writes")
		return
	}
	switch err := seal.Verify(v.keys, r.Key, SigningContext, signed, sig); {
	case errors.Is(err, seal.ErrUntrustedKey):
		v.problem(seq, subject, ProblemBadSignature, "signed by key %.12s…, which is not trusted", r.Key)
		return
	case err != nil:
		v.problem(seq, subject, ProblemBadSignature, "signature by %.12s… does not match the record", r.Key)
		return
	}
	v.rep.Signed++
}
