package landlock

// Test helpers for the external test package landlock_test.
var (
	InChild  = inChild
	IsChild  = isChild
	Variants = variants
)
