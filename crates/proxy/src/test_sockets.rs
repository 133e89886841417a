//! Test helpers shared by the relay and splice unit tests.

use tokio::net::{TcpListener, TcpStream};

/// Two connected loopback sockets: (the connecting side, the accepted side).
pub(crate) async fn socket_pair() -> (TcpStream, TcpStream) {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let connect = TcpStream::connect(listener.local_addr().unwrap());
    let (connected, accepted) = tokio::join!(connect, listener.accept());
    (connected.unwrap(), accepted.unwrap().0)
}
