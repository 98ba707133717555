// Command hello is the bench's Go floor (scenario floor): a static Go
// program that does nothing. Its time is what starting any Go process
// costs on the machine — the runtime, its first heap pages and threads —
// which every strata process pays before its first line of work.
package main

func main() {}
