// Package config is maitred's configuration: the file's shape (Config and
// the sections under it), its defaults (Default), a strict decode that
// refuses unknown keys and ill-typed values naming the key path (Parse,
// Load; decode.go), and validation of the whole, also naming key paths
// (Validate). A config that passes all three never fails later for a
// reason that was visible at start.
//
// # Files
//
// Each section is defined, and validates itself, in a file of its own:
// config.go holds Config (the top-level keys: listeners, limits, timeouts,
// priorities, backend policy), Default, Load, Parse and Validate, which
// composes the sections' checks and reports every problem; models.go the
// models and their backends; health.go backend probing; triage.go the
// triage thresholds; tracing.go the trace exporter; store.go the shared
// store; keys.go the auth section and keys files; fleet.go the part of a
// config package fleet reads (FleetConfig, Config.Fleet). restart.go reads the
// reload tags that declare which settings a running gateway cannot change
// (KeepRestartOnly: what a reload keeps, and names).
//
// # Ownership and concurrency
//
// A Config is plain data: the process builds one at start, and again at
// each reload (SIGHUP, or the file changing), and hands it to the layers
// that read it (fleet, admission pools, the gateway, triage thresholds).
// Nothing mutates a Config after Validate; readers share it without locks.
// A backend entry is a url, or a dns (name:port) or srv name standing for
// several backends (BackendConfig.Discovered). configs/ holds the reference file (every default spelled
// out; a test checks it equals Default), a minimal file and configs/bad,
// one refused file per rule, each naming the error it must produce.
//
// The auth section (keys.go) lists API keys; its keys_file holds more,
// in the same shape, which ParseKeys decodes and validates on its own
// (with key paths into the file) so that the gateway can re-read it while
// it runs. A keys_file written as JSON is read by a decoder of that one
// shape (keys_json.go), held to yaml.v3's reading of the same bytes by a
// differential test; anything it does not read exactly as yaml.v3 does
// goes to yaml.v3. ReadKeySet (keys_set.go) reads a keys_file straight
// into a KeySet, the shape the gateway's key table is made of (the names
// in one string, the index by digest, the distinct profiles), validating
// each key as the decoder reads it, so that a 100k-key reload allocates
// about what the set holds; NewKeySet makes one from lists, and the
// validation of every key list is the set's. The reading and the
// validation yield to the scheduler every KeyYieldEvery keys (a 100k-key
// reload runs beside requests).
// config only reads files and the environment; watching the file
// is the gateway's.
//
// config imports no other maitred package and no network code (a test in
// internal/archtest enforces it).
package config
