//go:build !strata_nodelta

package store

// deltasOn: new versions of chunks are delta-coded (storeLike). Building
// with -tags strata_nodelta turns that off, for the bench's baseline of
// the same revision (docs/store.md, "Delta-coded chunks": the 1-file
// commit's latency with and without).
const deltasOn = true
