package approval

// SetMaxListed lowers the bound of Exposures for a test and returns the
// function restoring it.
func SetMaxListed(n int) (restore func()) {
	old := maxListed
	maxListed = n
	return func() { maxListed = old }
}
