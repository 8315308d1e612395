package events

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"time"
)

// CloudEvents attributes kvlive writes.
const (
	// SpecVersion is the CloudEvents specification version of the envelope.
	SpecVersion = "1.0"
	// ContentType is the structured-mode CloudEvents media type of a message body.
	ContentType = "application/cloudevents+json"
	// dataContentType is the media type of the envelope's data.
	dataContentType = "application/json"
	typePrefix      = "io.kvlive."
)

// The CloudEvents types kvlive publishes; the last token is the payload version.
const (
	TypeInstancetypeChanged = "io.kvlive.instancetype.changed.v1"
	TypePreferenceChanged   = "io.kvlive.preference.changed.v1"
	TypeSwitchRequested     = "io.kvlive.switch.requested.v1"
	TypePlan                = "io.kvlive.plan.v1"
	TypeOutcome             = "io.kvlive.outcome.v1"
	TypeVerdict             = "io.kvlive.verdict.v1"
)

var knownTypes = map[string]bool{
	TypeInstancetypeChanged: true,
	TypePreferenceChanged:   true,
	TypeSwitchRequested:     true,
	TypeUndoRequested:       true,
	TypeRestartRequested:    true,
	TypePlan:                true,
	TypeOutcome:             true,
	TypeVerdict:             true,
	TypeNotification:        true,
}

// Envelope is a CloudEvents 1.0 structured-mode JSON envelope.
type Envelope struct {
	SpecVersion     string          `json:"specversion"`
	ID              string          `json:"id"`
	Source          string          `json:"source"`
	Type            string          `json:"type"`
	Subject         string          `json:"subject,omitempty"`
	Time            time.Time       `json:"time"`
	DataContentType string          `json:"datacontenttype"`
	Data            json.RawMessage `json:"data"`
}

// Payload is a message body kvlive can validate after decoding.
type Payload interface {
	Validate() error
}

// Encode wraps payload in an envelope of the given type and id and marshals it.
func Encode(typ, id, source, subject string, at time.Time, payload Payload) ([]byte, error) {
	if !knownTypes[typ] {
		return nil, fmt.Errorf("events: encode: unknown type %q", typ)
	}
	if err := payload.Validate(); err != nil {
		return nil, fmt.Errorf("events: encode %s %s: %w", typ, id, err)
	}
	data, err := json.Marshal(payload)
	if err != nil {
		return nil, fmt.Errorf("events: encode %s %s: %w", typ, id, err)
	}
	return json.Marshal(Envelope{
		SpecVersion:     SpecVersion,
		ID:              id,
		Source:          source,
		Type:            typ,
		Subject:         subject,
		Time:            at.UTC(),
		DataContentType: dataContentType,
		Data:            data,
	})
}

// Why a message was rejected; DecodeError.Reason holds one of these.
const (
	ReasonMalformed      = "malformed"
	ReasonUnknownType    = "unknown-type"
	ReasonUnknownVersion = "unknown-version"
	ReasonInvalid        = "invalid"
)

// DecodeError says why a message body could not be decoded. It is permanent:
// the same bytes will never decode, so consumers dead-letter the message.
type DecodeError struct {
	Reason string
	Err    error
}

func (e *DecodeError) Error() string {
	return "events: " + e.Reason + ": " + e.Err.Error()
}

func (e *DecodeError) Unwrap() error { return e.Err }

// IsDecodeError reports whether err, or one it wraps, is a *DecodeError.
func IsDecodeError(err error) bool {
	var de *DecodeError
	return errors.As(err, &de)
}

func decodeErr(reason, format string, args ...any) error {
	return &DecodeError{Reason: reason, Err: fmt.Errorf(format, args...)}
}

// Parse decodes and checks an envelope without touching its data.
func Parse(body []byte) (*Envelope, error) {
	var env Envelope
	if err := json.Unmarshal(body, &env); err != nil {
		return nil, decodeErr(ReasonMalformed, "envelope: %v", err)
	}
	switch {
	case env.SpecVersion == "":
		return nil, decodeErr(ReasonMalformed, "not a CloudEvents envelope: no specversion")
	case env.SpecVersion != SpecVersion:
		return nil, decodeErr(ReasonUnknownVersion, "specversion %q, want %q", env.SpecVersion, SpecVersion)
	case env.ID == "" || env.Source == "" || env.Type == "":
		return nil, decodeErr(ReasonMalformed, "envelope needs id, source and type")
	case len(bytes.TrimSpace(env.Data)) == 0 || bytes.Equal(bytes.TrimSpace(env.Data), []byte("null")):
		return nil, decodeErr(ReasonMalformed, "envelope %s has no data", env.ID)
	}
	if !knownTypes[env.Type] {
		if base, _, ok := splitVersion(env.Type); ok && knownBase(base) {
			return nil, decodeErr(ReasonUnknownVersion, "type %q: this kvlive reads %s", env.Type, knownVersionsOf(base))
		}
		return nil, decodeErr(ReasonUnknownType, "type %q", env.Type)
	}
	return &env, nil
}

// Into decodes the envelope's data into p and validates it.
func (e *Envelope) Into(p Payload) error {
	if err := json.Unmarshal(e.Data, p); err != nil {
		return decodeErr(ReasonMalformed, "%s %s data: %v", e.Type, e.ID, err)
	}
	if err := p.Validate(); err != nil {
		return decodeErr(ReasonInvalid, "%s %s: %v", e.Type, e.ID, err)
	}
	return nil
}

// Decode parses body, checks it is of type want and decodes it into p.
func Decode(body []byte, want string, p Payload) (*Envelope, error) {
	env, err := Parse(body)
	if err != nil {
		return nil, err
	}
	if env.Type != want {
		return env, decodeErr(ReasonUnknownType, "type %q where %q was expected", env.Type, want)
	}
	return env, env.Into(p)
}

func splitVersion(typ string) (base, version string, ok bool) {
	i := strings.LastIndexByte(typ, '.')
	if i < 0 || !strings.HasPrefix(typ, typePrefix) || len(typ) < i+2 || typ[i+1] != 'v' {
		return "", "", false
	}
	return typ[:i], typ[i+1:], true
}

func knownBase(base string) bool {
	return knownVersionsOf(base) != ""
}

func knownVersionsOf(base string) string {
	var versions []string
	for t := range knownTypes {
		if b, v, _ := splitVersion(t); b == base {
			versions = append(versions, v)
		}
	}
	return strings.Join(versions, ", ")
}
