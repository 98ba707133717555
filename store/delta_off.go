//go:build strata_nodelta

package store

// deltasOn is off in a strata_nodelta build: every chunk is stored whole,
// as before delta coding (the bench's baseline; reads still decode deltas).
const deltasOn = false
