package main

import (
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"time"
)

// config is what taskctl keeps between runs: the logins, one per API, and
// the API of the last one. It holds bearer tokens, so it is written 0600 in
// a 0700 directory.
type config struct {
	API      string             `json:"api,omitempty"`
	Sessions map[string]session `json:"sessions,omitempty"`
}

type session struct {
	Token     string    `json:"token"`
	Email     string    `json:"email"`
	Name      string    `json:"name,omitempty"`
	ExpiresAt time.Time `json:"expires_at"`
}

// configPath is $XDG_CONFIG_HOME/taskctl/config.json on Linux (see
// os.UserConfigDir for other systems).
func configPath() (string, error) {
	dir, err := os.UserConfigDir()
	if err != nil {
		return "", fmt.Errorf("find the config directory: %w (set HOME or XDG_CONFIG_HOME)", err)
	}
	return filepath.Join(dir, "taskctl", "config.json"), nil
}

// loadConfig reads the config; a missing file is an empty config.
func (a *app) loadConfig() (*config, error) {
	cfg := &config{Sessions: map[string]session{}}
	path, err := configPath()
	if err != nil {
		return nil, err
	}
	raw, err := os.ReadFile(path)
	if errors.Is(err, fs.ErrNotExist) {
		return cfg, nil
	}
	if err != nil {
		return nil, fmt.Errorf("read %s: %w", path, err)
	}
	if err := json.Unmarshal(raw, cfg); err != nil {
		return nil, fmt.Errorf("read %s: %w (delete it and log in again)", path, err)
	}
	if cfg.Sessions == nil {
		cfg.Sessions = map[string]session{}
	}
	return cfg, nil
}

// saveConfig writes the config atomically with mode 0600.
func (a *app) saveConfig(cfg *config) (string, error) {
	path, err := configPath()
	if err != nil {
		return "", err
	}
	if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
		return "", fmt.Errorf("create %s: %w", filepath.Dir(path), err)
	}
	raw, err := json.MarshalIndent(cfg, "", "  ")
	if err != nil {
		return "", err
	}
	tmp, err := os.CreateTemp(filepath.Dir(path), ".config-*.json")
	if err != nil {
		return "", fmt.Errorf("write %s: %w", path, err)
	}
	defer os.Remove(tmp.Name()) // after a successful rename there is nothing to remove
	if err := tmp.Chmod(0o600); err != nil {
		tmp.Close()
		return "", fmt.Errorf("write %s: %w", path, err)
	}
	if _, err := tmp.Write(append(raw, '\n')); err != nil {
		tmp.Close()
		return "", fmt.Errorf("write %s: %w", path, err)
	}
	if err := tmp.Close(); err != nil {
		return "", fmt.Errorf("write %s: %w", path, err)
	}
	if err := os.Rename(tmp.Name(), path); err != nil {
		return "", fmt.Errorf("write %s: %w", path, err)
	}
	return path, nil
}
