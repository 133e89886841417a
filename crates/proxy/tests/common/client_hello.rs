/// A minimal but well-formed TLS 1.3 ClientHello record, as a client would send it first on
/// a tunnel: optional SNI, optional ECH extension (type 0xfe0d), everything rustls's
/// `Acceptor` needs (null compression, signature_algorithms).
pub(crate) fn client_hello(sni: Option<&str>, ech: bool) -> Vec<u8> {
    fn with_u16_len(body: &[u8]) -> Vec<u8> {
        let mut out = (body.len() as u16).to_be_bytes().to_vec();
        out.extend_from_slice(body);
        out
    }
    fn extension(kind: u16, data: &[u8]) -> Vec<u8> {
        let mut out = kind.to_be_bytes().to_vec();
        out.extend(with_u16_len(data));
        out
    }
    let mut extensions = Vec::new();
    if let Some(name) = sni {
        let mut entry = vec![0u8];
        entry.extend(with_u16_len(name.as_bytes()));
        extensions.extend(extension(0x0000, &with_u16_len(&entry)));
    }
    extensions.extend(extension(0x000d, &with_u16_len(&[0x08, 0x04, 0x04, 0x03])));
    extensions.extend(extension(0x000a, &with_u16_len(&[0x00, 0x1d])));
    extensions.extend(extension(0x002b, &[0x02, 0x03, 0x04]));
    let mut key_share = vec![0x00, 0x1d, 0x00, 0x20];
    key_share.extend([7u8; 32]);
    extensions.extend(extension(0x0033, &with_u16_len(&key_share)));
    if ech {
        let mut outer = vec![0x00, 0x00, 0x01, 0x00, 0x01, 0x2a];
        outer.extend(with_u16_len(&[9u8; 32]));
        outer.extend(with_u16_len(&[5u8; 16]));
        extensions.extend(extension(0xfe0d, &outer));
    }
    let mut body = vec![0x03, 0x03];
    body.extend([1u8; 32]);
    body.push(0);
    body.extend(with_u16_len(&[0x13, 0x01]));
    body.extend([0x01, 0x00]);
    body.extend(with_u16_len(&extensions));
    let mut handshake = vec![0x01];
    handshake.extend(&(body.len() as u32).to_be_bytes()[1..]);
    handshake.extend(body);
    let mut record = vec![0x16, 0x03, 0x01];
    record.extend(with_u16_len(&handshake));
    record
}
