package orchestrator

import (
	"bufio"
	"bytes"
	"fmt"
	"os"
	"strings"

	zmq "github.com/pebbe/zmq4"
)

// KeyPair is a CURVE key pair in Z85 text. Secret is empty for a
// public-key-only file.
type KeyPair struct {
	Public string
	Secret string
}

// NewKeyPair generates a CURVE key pair.
func NewKeyPair() (KeyPair, error) {
	if !zmq.HasCurve() {
		return KeyPair{}, fmt.Errorf("orchestrator: libzmq was built without CURVE support")
	}
	pub, sec, err := zmq.NewCurveKeypair()
	if err != nil {
		return KeyPair{}, fmt.Errorf("orchestrator: generating a CURVE key pair: %w", err)
	}
	return KeyPair{Public: pub, Secret: sec}, nil
}

// Marshal renders the pair in the key file format:
//
//	# sluice CURVE key pair (Z85)
//	public-key = <40 characters>
//	secret-key = <40 characters>
//
// The secret-key line is left out when Secret is empty.
func (k KeyPair) Marshal() []byte {
	var b bytes.Buffer
	b.WriteString("# sluice CURVE key pair (Z85)\n")
	fmt.Fprintf(&b, "public-key = %s\n", k.Public)
	if k.Secret != "" {
		fmt.Fprintf(&b, "secret-key = %s\n", k.Secret)
	}
	return b.Bytes()
}

// WriteKeyFile writes k to path, readable by its owner only when it holds
// a secret key.
func WriteKeyFile(path string, k KeyPair) error {
	mode := os.FileMode(0o644)
	if k.Secret != "" {
		mode = 0o600
	}
	if err := os.WriteFile(path, k.Marshal(), mode); err != nil {
		return fmt.Errorf("orchestrator: writing key file: %w", err)
	}
	return nil
}

// ReadKeyFile reads a key file written by WriteKeyFile (or `ifctl
// keygen`). The public key is required; a secret key, when present, must
// belong to it.
func ReadKeyFile(path string) (KeyPair, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return KeyPair{}, fmt.Errorf("orchestrator: key file: %w", err)
	}
	k, err := ParseKeyFile(data)
	if err != nil {
		return KeyPair{}, fmt.Errorf("orchestrator: key file %s: %w", path, err)
	}
	return k, nil
}

// ParseKeyFile parses the key file format (see KeyPair.Marshal).
func ParseKeyFile(data []byte) (KeyPair, error) {
	var k KeyPair
	sc := bufio.NewScanner(bytes.NewReader(data))
	for line := 1; sc.Scan(); line++ {
		text := strings.TrimSpace(sc.Text())
		if text == "" || strings.HasPrefix(text, "#") {
			continue
		}
		name, value, ok := strings.Cut(text, "=")
		if !ok {
			return KeyPair{}, fmt.Errorf("line %d: want NAME = VALUE", line)
		}
		name, value = strings.TrimSpace(name), strings.Trim(strings.TrimSpace(value), `"`)
		var dst *string
		switch name {
		case "public-key":
			dst = &k.Public
		case "secret-key":
			dst = &k.Secret
		default:
			return KeyPair{}, fmt.Errorf("line %d: unknown name %q (want public-key or secret-key)", line, name)
		}
		if err := checkKey(value); err != nil {
			return KeyPair{}, fmt.Errorf("line %d: %s: %w", line, name, err)
		}
		*dst = value
	}
	if err := sc.Err(); err != nil {
		return KeyPair{}, err
	}
	if k.Public == "" {
		return KeyPair{}, fmt.Errorf("no public-key line")
	}
	if k.Secret != "" {
		pub, err := zmq.AuthCurvePublic(k.Secret)
		if err != nil {
			return KeyPair{}, fmt.Errorf("deriving the public key: %w", err)
		}
		if pub != k.Public {
			return KeyPair{}, fmt.Errorf("public-key does not belong to secret-key")
		}
	}
	return k, nil
}
