package main

func scaleOptionsFromFlags() scaleOptions { return scaleOptions{} }

type scaleOptions struct{}

func scale(o scaleOptions) error { return nil }
