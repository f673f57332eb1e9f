package main

import "errors"

func drift(args []string) error { return errors.New("drift: not implemented yet") }
