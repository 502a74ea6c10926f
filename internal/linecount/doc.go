// Package linecount holds the module-wide test that bounds the length of
// non-test files: a file over 450 lines makes a newcomer scroll back and
// forth, so one that stays longer is named in its package's doc.go as
// "<file> is over 450 lines" with the reason it is one file.
package linecount
