package image

import (
	"encoding/json"
	"fmt"
	"strings"
)

// LayerRefPrefix names the refs that index layer commits by chain ID:
// LayerRefPrefix + the chain ID's hex. They are not branches a user works
// on (strata's branch listing leaves them out); as refs, gc keeps their
// commits, so a later import that shares a layer finds it.
const LayerRefPrefix = "image-layers/"

// ConfigTrailer starts the line of an image commit's message that holds
// its Config as JSON.
const ConfigTrailer = "Image-Config: "

// Labels of a pushed image's config that name the strata commit it was
// pushed from and that commit's tree (a pull checks the tree it makes
// against it).
const (
	LabelCommit = "org.stratafs.commit"
	LabelTree   = "org.stratafs.tree"
	// LabelRoot marks a pushed snapshot that is an image's tree (a
	// commit made on an imported image): a workspace forked from its
	// pull is image-rooted. A snapshot of a project has LabelCommit and
	// not this: its pull is a project, as it was pushed.
	LabelRoot = "org.stratafs.root"
	// AnnotationBaseDigest / AnnotationBaseName link a pushed snapshot
	// to the image it is rooted in (image-spec annotations.md).
	AnnotationBaseDigest = "org.opencontainers.image.base.digest"
	AnnotationBaseName   = "org.opencontainers.image.base.name"
)

// Config is what strata keeps of an image's configuration, with the
// commit of its top layer (see Import).
type Config struct {
	Source       string            `json:"source"`        // the reference imported, skopeo syntax
	Digest       string            `json:"digest"`        // the manifest's digest
	ConfigDigest string            `json:"config_digest"` //
	OS           string            `json:"os,omitempty"`
	Architecture string            `json:"architecture,omitempty"`
	Variant      string            `json:"variant,omitempty"`
	Env          []string          `json:"env,omitempty"`
	WorkingDir   string            `json:"working_dir,omitempty"`
	User         string            `json:"user,omitempty"`
	Entrypoint   []string          `json:"entrypoint,omitempty"`
	Cmd          []string          `json:"cmd,omitempty"`
	Labels       map[string]string `json:"labels,omitempty"`
	// DiffIDs are the layers' uncompressed digests, bottom first.
	DiffIDs []string `json:"diff_ids"`
}

// IsRoot reports whether the image is a root filesystem to run in: any
// image but a pushed snapshot of a project (LabelCommit without
// LabelRoot), whose pull is a project tree again.
func (c *Config) IsRoot() bool {
	return c.Labels[LabelCommit] == "" || c.Labels[LabelRoot] != ""
}

// ConfigFromMessage returns the Config an image commit's message holds,
// nil if it is not an image commit.
func ConfigFromMessage(msg string) (*Config, error) {
	for _, line := range strings.Split(msg, "\n") {
		if rest, ok := strings.CutPrefix(line, ConfigTrailer); ok {
			var c Config
			if err := json.Unmarshal([]byte(rest), &c); err != nil {
				return nil, fmt.Errorf("image config of commit: %w", err)
			}
			return &c, nil
		}
	}
	return nil, nil
}
