//go:build cuda

package main

// cudaBuild says this binary has the CUDA backend (esper version).
const cudaBuild = true
