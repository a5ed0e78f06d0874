// Package assemble builds what the commands run from one configuration: the
// counter store stack, the decision sinks, the allow, deny and challenge lists, the
// challenge keys, the limiter over them, the origin handler and the admin
// metrics. `ratewarden edge`, `ratewarden lambda` and the tests call the
// same functions, so a fix or a privacy setting reaches every shape, and a
// test that assembles an Edge runs exactly what the binary runs.
//
// An Edge owns everything it opened; Close flushes the decisions and closes
// the parts in the reverse order of opening.
package assemble
