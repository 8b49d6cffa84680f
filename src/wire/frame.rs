//! Reads length-prefixed Kafka frames from a socket, refusing lengths that are negative or
//! above `socket.request.max.bytes` before allocating anything for them.

use bytes::{Bytes, BytesMut};
use tokio::io::{AsyncRead, AsyncReadExt};

/// The read buffer between frames. Memory is allocated as a frame's bytes arrive, so a huge
/// length prefix with little data behind it (slowloris) costs little, and an idle
/// connection holds only this much. (The allocator, mimalloc, makes what it hands out
/// resident, touched or not: 10,000 connections with a 64 KiB buffer each held 640 MiB.)
const READ_START_BYTES: usize = 4 * 1024;
/// Reads of a frame past its first `READ_START_BYTES` take at least this much room.
const READ_CHUNK_BYTES: usize = 64 * 1024;

#[derive(Debug, thiserror::Error)]
pub enum FrameError {
    #[error("frame length {0} is negative")]
    Negative(i32),
    #[error("frame length {len} exceeds socket.request.max.bytes {max}")]
    TooLarge { len: usize, max: usize },
    #[error("connection closed inside a frame")]
    Truncated,
    #[error("i/o error: {0}")]
    Io(#[from] std::io::Error),
}

pub struct FrameReader<R> {
    inner: R,
    buf: BytesMut,
    frame_bytes_max: usize,
}

impl<R: AsyncRead + Unpin> FrameReader<R> {
    pub fn new(inner: R, frame_bytes_max: usize) -> Self {
        FrameReader {
            inner,
            buf: BytesMut::new(),
            frame_bytes_max,
        }
    }

    /// The next frame without its length prefix; `None` at a clean end of stream.
    pub async fn next(&mut self) -> Result<Option<Bytes>, FrameError> {
        if self.buf.is_empty() && self.buf.capacity() > READ_START_BYTES {
            // The last frame's allocation goes with that frame, not with the connection.
            self.buf = BytesMut::new();
        }
        while self.buf.len() < 4 {
            if !self.fill().await? {
                return if self.buf.is_empty() {
                    Ok(None)
                } else {
                    Err(FrameError::Truncated)
                };
            }
        }
        let len = i32::from_be_bytes([self.buf[0], self.buf[1], self.buf[2], self.buf[3]]);
        if len < 0 {
            return Err(FrameError::Negative(len));
        }
        let len = len as usize;
        if len > self.frame_bytes_max {
            return Err(FrameError::TooLarge {
                len,
                max: self.frame_bytes_max,
            });
        }
        while self.buf.len() < 4 + len {
            let missing = 4 + len - self.buf.len();
            // At most what is missing, and at most what has arrived again once a frame is
            // past its first few KiB: memory grows with what a client sends, so one that
            // claims a large frame and sends a little of it (slowloris) holds little.
            let step = match self.buf.len() < READ_START_BYTES {
                true => READ_START_BYTES,
                false => READ_CHUNK_BYTES.max(self.buf.len()),
            };
            self.buf.reserve(missing.min(step));
            if !self.fill().await? {
                return Err(FrameError::Truncated);
            }
        }
        let mut frame = self.buf.split_to(4 + len);
        let _ = frame.split_to(4);
        Ok(Some(frame.freeze()))
    }

    /// Reads more; false at the end of the stream. A TLS stream closed without TLS's
    /// close_notify ends as an UnexpectedEof error, which most clients do on close: that is
    /// an end of stream too (a frame cut short is still `Truncated`, by the callers).
    async fn fill(&mut self) -> Result<bool, FrameError> {
        if self.buf.capacity() - self.buf.len() == 0 {
            self.buf.reserve(READ_START_BYTES);
        }
        match self.inner.read_buf(&mut self.buf).await {
            Ok(n) => Ok(n > 0),
            Err(e) if e.kind() == std::io::ErrorKind::UnexpectedEof => Ok(false),
            Err(e) => Err(e.into()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    async fn frames(input: &[u8], max: usize) -> Vec<Result<Option<Bytes>, String>> {
        let mut r = FrameReader::new(input, max);
        let mut out = Vec::new();
        loop {
            match r.next().await {
                Ok(Some(f)) => out.push(Ok(Some(f))),
                Ok(None) => {
                    out.push(Ok(None));
                    return out;
                }
                Err(e) => {
                    out.push(Err(e.to_string()));
                    return out;
                }
            }
        }
    }

    #[tokio::test]
    async fn a_frame_takes_memory_as_its_bytes_arrive_and_gives_it_back_when_done() {
        use futures_util::FutureExt;
        use tokio::io::AsyncWriteExt;
        let (mut client, server) = tokio::io::duplex(1 << 20);
        let mut r = FrameReader::new(server, 200 << 20);
        // Slowloris: the largest frame claimed, 10 bytes of it sent.
        client
            .write_all(&(100i32 << 20).to_be_bytes())
            .await
            .unwrap();
        client.write_all(&[1; 10]).await.unwrap();
        assert!(r.next().now_or_never().is_none(), "waits for the rest");
        assert_eq!(r.buf.len(), 14);
        assert!(
            r.buf.capacity() <= 2 * READ_START_BYTES,
            "{}",
            r.buf.capacity()
        );
        // 200 KiB more: the buffer grows with what came, not to the claim.
        client.write_all(&[2; 200 << 10]).await.unwrap();
        assert!(r.next().now_or_never().is_none());
        assert_eq!(r.buf.len(), 14 + (200 << 10));
        assert!(r.buf.capacity() <= 4 * r.buf.len(), "{}", r.buf.capacity());
        assert!(r.buf.capacity() < 1 << 20, "{}", r.buf.capacity());

        // A large frame read whole: the connection then holds no more than the start.
        let mut r = FrameReader::new(tokio::io::empty(), 200 << 20);
        r.buf.extend_from_slice(&(300i32 << 10).to_be_bytes());
        r.buf.extend_from_slice(&[3; 300 << 10]);
        let frame = r.next().await.unwrap().unwrap();
        assert_eq!(frame.len(), 300 << 10);
        assert!(matches!(r.next().await, Ok(None)));
        assert!(r.buf.capacity() <= READ_START_BYTES, "{}", r.buf.capacity());
    }

    #[tokio::test]
    async fn splits_frames_and_refuses_bad_lengths() {
        let mut input = vec![0, 0, 0, 2, b'h', b'i', 0, 0, 0, 0];
        input.extend_from_slice(&[0, 0, 0, 1, b'x']);
        let f = frames(&input, 100).await;
        assert_eq!(f.len(), 4);
        assert_eq!(f[0].as_ref().unwrap().as_deref(), Some(&b"hi"[..]));
        assert_eq!(f[1].as_ref().unwrap().as_deref(), Some(&b""[..]));
        assert!(matches!(f[3], Ok(None)));

        let f = frames(&(-1i32).to_be_bytes(), 100).await;
        assert!(f[0].as_ref().unwrap_err().contains("negative"));
        let f = frames(&i32::MAX.to_be_bytes(), 100).await;
        assert!(f[0].as_ref().unwrap_err().contains("exceeds"));
        let f = frames(&[0, 0, 0, 9, 1, 2], 100).await;
        assert!(f[0].as_ref().unwrap_err().contains("closed inside"));
        let f = frames(&[0, 0], 100).await;
        assert!(f[0].as_ref().unwrap_err().contains("closed inside"));
    }
}
