//! The private-address floor: addresses no allowlisted *name* may lead to unless a `cidr`
//! rule names them. This is what stops `allowed.example → 169.254.169.254` (DNS rebinding,
//! cloud metadata) and `allowed.example → 127.0.0.1` (the proxy's own host).
