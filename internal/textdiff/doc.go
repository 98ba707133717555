// Package textdiff computes line diffs, writes them as git-style patches, and
// merges three versions of a text file.
//
// Terms, used with exactly these meanings throughout the package:
//
//   - A line is a run of bytes ending in '\n', or the bytes after the last
//     '\n' when the content does not end in one. The newline belongs to the
//     line, so "x\n" and a final "x" without newline are different lines.
//     Content is never decoded: lines are compared as bytes, "\r\n" is just a
//     line whose last two bytes are '\r' and '\n'.
//   - An Op is a run of lines that are equal in both inputs, deleted from
//     the old one, or inserted from the new one. Lines returns the runs of a
//     diff in order; together they cover both inputs exactly once.
//   - A change is a maximal Delete and/or Insert between two Equal runs.
//   - A hunk is one "@@ -l,s +l,s @@" block of a unified diff: one or more
//     changes with up to context lines of unchanged text around them
//     (DefaultContext, 3, unless given). Two changes at most 2×context
//     unchanged lines apart share a hunk, as in git.
//   - A file patch is what `git diff --binary` prints for one path: the
//     "diff --git" header, extended header lines (modes, rename, index) and
//     either hunks or a "GIT binary patch". A binary file is one whose
//     first 8000 bytes contain a NUL, git's own test (xdiff-interface.c
//     buffer_is_binary).
//   - A git mode is the file type and permission as git records it:
//     0100644, 0100755, 0120000 for a symlink (whose content is its
//     target), or 0 for "absent".
//   - Base, ours and theirs are the three inputs of a three-way merge: two
//     descendants of a common base. A conflict is a region where both
//     descendants changed the base differently, or where their changes touch
//     (see Merge3).
//
// The diff algorithm is Myers' O(ND) in linear space, as in git's xdiff,
// with the same pre-pass (common prefix and suffix trimmed, lines present in
// only one input set aside as changed) and the same cost cap: when one
// bisection step has spent max(256, √(N+M)) edit steps without the forward
// and backward searches meeting, it splits at the furthest-reaching diagonal
// instead (xdiffi.c xdl_split). The result is then still a correct diff,
// but not necessarily a minimal one; below the cap it is minimal. Changes
// are then slid as git slides them (xdl_change_compact, with git diff's
// indent heuristic), so on the test corpus Lines and Hunks produce git
// diff's hunks exactly. Merge3 slides without the indent heuristic, as git
// merge-file does.
package textdiff
