"""Moving a route between providers: the route model, the canary draw and the guard (pure
policy, no I/O), and the mechanism around them (the router, route control, the guard loop,
shadow gating and pairing, the ``cutover route`` commands). docs/canary.md and docs/shadow.md
describe the operator's side."""
