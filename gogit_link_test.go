package strata

// The root package's git tests need the go-git implementation, which a
// binary links by importing package worktree/gogit (worktree's doc says
// why the split).
import _ "github.com/stratafs/strata/worktree/gogit"
