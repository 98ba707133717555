package workspace

import (
	"fmt"

	"github.com/stratafs/strata/nsexec"
)

// CheckSubIDs fails, saying what is missing, when a workspace asks for
// subordinate ids the user does not have. Real root needs none.
func CheckSubIDs(want bool) error {
	if !want || nsexec.RealRoot() {
		return nil
	}
	_, err := nsexec.SubIDMaps()
	return err
}

// NeedSubIDNS fails when work on a workspace that maps subordinate ids
// (starting it, reading its changes) is attempted outside their user
// namespace.
func NeedSubIDNS(rec *Record) error {
	if rec.SubIDs && nsexec.NeedSubIDNS() {
		return fmt.Errorf("workspace %q maps subordinate ids: its changes are read from their user namespace (call nsexec.EnterSubIDs first; the strata command does): %w", rec.Name, nsexec.ErrNeedSubIDNS)
	}
	return nil
}
