package main

import (
	"errors"
	"fmt"
	"io"

	"github.com/ratewarden/ratewarden/edge/lambdaedge"
)

// runLambdaEdge builds the viewer-request function for CloudFront
// (Lambda@Edge): `ratewarden lambda-edge build --config FILE --out DIR`.
func runLambdaEdge(args []string, stdout, stderr io.Writer) error {
	if len(args) == 0 || args[0] != "build" {
		if len(args) > 0 && (args[0] == "-h" || args[0] == "--help") {
			fmt.Fprintln(stdout, "Usage: ratewarden lambda-edge build --config FILE --out DIR")
			return nil
		}
		fmt.Fprintln(stderr, "Usage: ratewarden lambda-edge build --config FILE --out DIR")
		return errUsage
	}
	fs := newFlags("lambda-edge build", "lambda-edge build --config FILE --out DIR", stderr)
	cfgPath := fs.String("config", "", "configuration `file` (default: the built-in seed configuration)")
	out := fs.String("out", "", "`directory` to write function/ and function.zip into (required)")
	if err := parseFlags(fs, args[1:]); err != nil {
		return err
	}
	if *out == "" || fs.NArg() > 0 {
		fs.Usage()
		return errUsage
	}
	cfg, err := loadConfig(*cfgPath)
	if err != nil {
		return err
	}
	res, err := lambdaedge.Build(cfg, *out)
	if err != nil {
		return errors.Join(errors.New("lambda-edge build"), err)
	}
	fmt.Fprintf(stdout, "wrote %s (handler index.handler, Node.js 20) and %s (%d bytes zipped, of %d allowed)\n",
		res.Dir, res.Zip, res.ZipBytes, lambdaedge.MaxZipBytes)
	return nil
}
