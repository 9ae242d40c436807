// Package filestore is the embedded credential store: one AES-256-GCM
// encrypted file per server under a directory only the owner can enter.
package filestore

import (
	"context"
	"crypto/aes"
	"crypto/cipher"
	"crypto/rand"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"time"

	"github.com/mcpbus/mcpbus/libs/apierr"
	"github.com/mcpbus/mcpbus/libs/model"
	"github.com/mcpbus/mcpbus/libs/secretfile"
	"github.com/mcpbus/mcpbus/services/credential/store"
)

const (
	// SubDir is the store's directory under a data dir (<data-dir>/secrets).
	SubDir = "secrets"
	// KeyFile is the name of the key inside the store's directory.
	KeyFile = "key"
	// Ext ends the name of each record file.
	Ext     = ".cred"
	keySize = 32 // AES-256
	// magic starts every record file; it versions the format and is part of
	// the additional data, so a file of another format never opens.
	magic = "MCB1"
	// maxRecord bounds what is read back (a record holds a few 64 KiB values at most).
	maxRecord = 16 << 20
)

// Store keeps records in a directory. It is safe for concurrent use; writes
// are atomic (temp file + rename), so a reader sees the old or the new record.
type Store struct {
	dir  string
	aead cipher.AEAD
}

var _ store.Store = (*Store)(nil)

// record is the plain text of one file.
type record struct {
	Credentials model.Credentials `json:"credentials"`
	UpdatedAt   time.Time         `json:"updated_at"`
}

// New opens (creating when missing) the store in dir: the directory gets mode
// 0700 and the key dir/key is created with 32 random bytes (mode 0600) on
// first use. A key that group or others can access is refused.
func New(dir string) (*Store, error) {
	if dir == "" {
		return nil, errors.New("filestore: no directory given")
	}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, fmt.Errorf("filestore: creating %s: %w", dir, err)
	}
	// MkdirAll leaves an existing directory as it is: tighten it, since the
	// record names (server ids) should not be listable by others either.
	st, err := os.Stat(dir)
	if err != nil {
		return nil, fmt.Errorf("filestore: %w", err)
	}
	if !st.IsDir() {
		return nil, fmt.Errorf("filestore: %s is not a directory", dir)
	}
	if st.Mode().Perm() != 0o700 {
		if err := os.Chmod(dir, 0o700); err != nil {
			return nil, fmt.Errorf("filestore: restricting %s to its owner: %w", dir, err)
		}
	}
	key, err := loadKey(filepath.Join(dir, KeyFile))
	if err != nil {
		return nil, fmt.Errorf("filestore: %w", err)
	}
	block, err := aes.NewCipher(key)
	if err != nil {
		return nil, fmt.Errorf("filestore: %w", err)
	}
	aead, err := cipher.NewGCM(block)
	if err != nil {
		return nil, fmt.Errorf("filestore: %w", err)
	}
	return &Store{dir: dir, aead: aead}, nil
}

// loadKey reads the key at path (a regular file of 32 bytes readable by its
// owner only), creating it when it does not exist.
func loadKey(path string) ([]byte, error) {
	key, err := secretfile.LoadOrCreate(path, keySize, func() ([]byte, error) {
		k := make([]byte, keySize)
		if _, err := rand.Read(k); err != nil {
			return nil, fmt.Errorf("generating key: %w", err)
		}
		return k, nil
	})
	if err != nil {
		return nil, fmt.Errorf("key: %w", err)
	}
	if len(key) != keySize {
		return nil, fmt.Errorf("key %s has %d bytes, want %d", path, len(key), keySize)
	}
	return key, nil
}

// Name is "file".
func (s *Store) Name() string { return "file" }

// Dir is the store's directory.
func (s *Store) Dir() string { return s.dir }

// Path is the file of key's record: "<kind>/<id>" lives in the kind's
// folder, a bare id (stored before kinds) at the top.
func (s *Store) Path(key string) string { return filepath.Join(s.dir, filepath.FromSlash(key)+Ext) }

// additionalData binds a file to its server: a file copied onto another
// server's name fails authentication.
func additionalData(key string) []byte { return []byte(magic + "\x00" + key) }

// Get reads and decrypts the record of key.
func (s *Store) Get(_ context.Context, key string) (model.Credentials, time.Time, error) {
	if err := store.CheckKey(key); err != nil {
		return model.Credentials{}, time.Time{}, err
	}
	data, err := readFile(s.Path(key))
	if errors.Is(err, fs.ErrNotExist) {
		return model.Credentials{}, time.Time{}, store.ErrNotFound
	}
	if err != nil {
		return model.Credentials{}, time.Time{}, apierr.Wrap(apierr.Internal, "reading the credentials of "+key+" failed", err)
	}
	ns := s.aead.NonceSize()
	if len(data) < len(magic)+ns+s.aead.Overhead() || string(data[:len(magic)]) != magic {
		return model.Credentials{}, time.Time{}, apierr.Newf(apierr.Internal, "the credential file of %s is not a credential record", key)
	}
	nonce := data[len(magic) : len(magic)+ns]
	plain, err := s.aead.Open(nil, nonce, data[len(magic)+ns:], additionalData(key))
	if err != nil {
		return model.Credentials{}, time.Time{}, apierr.Wrap(apierr.Internal, "the credential file of "+key+" cannot be decrypted: it was altered, belongs to another server or another key", err)
	}
	var rec record
	if err := json.Unmarshal(plain, &rec); err != nil {
		return model.Credentials{}, time.Time{}, apierr.Newf(apierr.Internal, "the credential record of %s is malformed", key)
	}
	return rec.Credentials, rec.UpdatedAt, nil
}

func readFile(path string) ([]byte, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	return io.ReadAll(io.LimitReader(f, maxRecord))
}

// Put encrypts creds with a fresh nonce and replaces the record atomically.
func (s *Store) Put(_ context.Context, key string, creds model.Credentials) error {
	if err := store.CheckKey(key); err != nil {
		return err
	}
	plain, err := json.Marshal(record{Credentials: creds, UpdatedAt: time.Now().UTC()})
	if err != nil {
		return apierr.Wrap(apierr.Internal, "encoding credentials", err)
	}
	nonce := make([]byte, s.aead.NonceSize())
	if _, err := rand.Read(nonce); err != nil {
		return apierr.Wrap(apierr.Internal, "generating a nonce", err)
	}
	out := make([]byte, 0, len(magic)+len(nonce)+len(plain)+s.aead.Overhead())
	out = append(out, magic...)
	out = append(out, nonce...)
	out = s.aead.Seal(out, nonce, plain, additionalData(key))
	clear(plain)
	path := s.Path(key)
	if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
		return apierr.Wrap(apierr.Internal, "writing the credentials of "+key+" failed", err)
	}
	if err := s.writeAtomic(path, out); err != nil {
		return apierr.Wrap(apierr.Internal, "writing the credentials of "+key+" failed", err)
	}
	return nil
}

// writeAtomic writes data to a temp file in the same directory (CreateTemp
// makes it 0600), syncs it and renames it over path.
func (s *Store) writeAtomic(path string, data []byte) (err error) {
	dir := filepath.Dir(path)
	tmp, err := os.CreateTemp(dir, ".tmp-*")
	if err != nil {
		return err
	}
	defer func() {
		if err != nil {
			_ = os.Remove(tmp.Name())
		}
	}()
	if _, err = tmp.Write(data); err == nil {
		err = tmp.Sync()
	}
	if cerr := tmp.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return err
	}
	if err = os.Rename(tmp.Name(), path); err != nil {
		return err
	}
	return syncDir(dir)
}

// syncDir makes a rename durable.
func syncDir(dir string) error {
	d, err := os.Open(dir)
	if err != nil {
		return err
	}
	defer d.Close()
	return d.Sync()
}

// Delete removes the record of key.
func (s *Store) Delete(_ context.Context, key string) error {
	if err := store.CheckKey(key); err != nil {
		return err
	}
	path := s.Path(key)
	if err := os.Remove(path); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return apierr.Wrap(apierr.Internal, "deleting the credentials of "+key+" failed", err)
	}
	if err := syncDir(filepath.Dir(path)); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return apierr.Wrap(apierr.Internal, "deleting the credentials of "+key+" failed", err)
	}
	return nil
}
