//! KIP-951's leader hints: a partition answered NOT_LEADER_OR_FOLLOWER or
//! FENCED_LEADER_EPOCH also names where it is led now (CurrentLeader), and the answer lists
//! the endpoints of the leaders it names (NodeEndpoints), so the client goes there without
//! waiting for a Metadata round trip. Produce (v10+), Fetch (v16+), ShareFetch and
//! ShareAcknowledge carry them; each fills its own generated types from [`Hints`].

use kafka_protocol::ResponseError;

use crate::broker::Broker;
use crate::topics::Topic;

/// The hints of one answer: the leaders named so far, each once, as (id, host, port) on
/// the request's listener.
pub(super) struct Hints<'a> {
    broker: &'a Broker,
    listener: &'a str,
    /// The live brokers, looked up on the first partition that needs a hint.
    live: Option<Vec<(i32, String, u16)>>,
    named: Vec<(i32, String, u16)>,
}

impl<'a> Hints<'a> {
    pub(super) fn new(broker: &'a Broker, listener: &'a str) -> Self {
        Hints {
            broker,
            listener,
            live: None,
            named: Vec::new(),
        }
    }

    /// For partition `index` of `topic` answered `error_code`, when the error calls for a
    /// hint: where it is led now as this broker knows it, (leader, leader epoch), or
    /// (-1, -1) when no live broker leads it (the client then looks it up). Never the
    /// protocol default (0, 0) of the share APIs: the Java client would keep its old
    /// leader, that epoch being no newer.
    pub(super) fn leader(
        &mut self,
        topic: Option<&Topic>,
        index: i32,
        error_code: i16,
    ) -> Option<(i32, i32)> {
        if error_code != ResponseError::NotLeaderOrFollower.code()
            && error_code != ResponseError::FencedLeaderEpoch.code()
        {
            return None;
        }
        let placement = topic.and_then(|t| t.partition(index).map(|p| p.placement()));
        let (broker, listener) = (self.broker, self.listener);
        let live = self
            .live
            .get_or_insert_with(|| broker.live_brokers(listener));
        let led = placement.and_then(|pl| {
            let node = live.iter().find(|b| b.0 == pl.leader)?;
            Some((node.clone(), pl.leader_epoch))
        });
        let Some((node, epoch)) = led else {
            return Some((-1, -1));
        };
        let id = node.0;
        if !self.named.iter().any(|b| b.0 == id) {
            self.named.push(node);
        }
        Some((id, epoch))
    }

    /// The leaders named, each once, as (id, host, port).
    pub(super) fn named(self) -> Vec<(i32, String, u16)> {
        self.named
    }
}

/// The NodeEndpoints of `hints` as the generated type `$endpoint` of one API.
macro_rules! node_endpoints {
    ($hints:expr, $endpoint:ty) => {
        $hints
            .named()
            .into_iter()
            .map(|(id, host, port)| {
                <$endpoint>::default()
                    .with_node_id(kafka_protocol::messages::BrokerId(id))
                    .with_host($crate::handlers::str_bytes(host))
                    .with_port(port as i32)
            })
            .collect::<Vec<$endpoint>>()
    };
}
pub(super) use node_endpoints;
