package natsconn

import (
	"fmt"
	"strings"

	"github.com/nats-io/nkeys"
)

// Identity is the key pair of the connection's nkey (Seed, else NKeyFile,
// read once), for a service that must prove who it is beyond its
// connection (a runner signs its resolves); nil without an nkey.
func (o Options) Identity() (nkeys.KeyPair, error) {
	seed := o.Seed
	if len(seed) == 0 && o.NKeyFile != "" {
		data, err := readSeed(o.NKeyFile)
		if err != nil {
			return nil, fmt.Errorf("nats identity: %w", err)
		}
		defer clear(data)
		seed = data
	}
	if len(seed) == 0 {
		return nil, nil
	}
	kp, err := nkeys.FromSeed([]byte(strings.TrimSpace(string(seed))))
	if err != nil {
		return nil, fmt.Errorf("nats identity: %w", err)
	}
	return kp, nil
}
