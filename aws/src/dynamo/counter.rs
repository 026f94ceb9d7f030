//! [`CounterStore`] on the leases, counts, dedup and dead-letters tables: each chunk one
//! `TransactWriteItems` with the checkpoint row.

use super::*;

#[async_trait]
impl CounterStore for DynamoStore {
    fn max_items_per_commit(&self) -> usize {
        MAX_TRANSACT_ITEMS - FENCE_ITEMS
    }

    async fn commit_chunk(&self, c: ChunkCommit<'_>) -> PortResult<()> {
        let fence = c.fence;
        let mut items = Vec::with_capacity(c.items.len() + FENCE_ITEMS);
        // The fence: the lease row's owner and epoch, and the progress recorded so far.
        let mut x = Expr::default();
        let mut cond = Self::fence_cond(&mut x, fence);
        let (cp, pe, pd, pc) = (
            x.name("checkpoint"),
            x.name("pending_end"),
            x.name("pending_done"),
            x.name("pending_count"),
        );
        cond.push_str(&x.seq_is(&cp, c.start_after));
        let end = x.val(s(c.end.as_str()));
        // DynamoDB rejects unused values, so the count is only named where an expression uses it.
        let needs_count = c.index > 0 || c.last.is_none();
        let count = if needs_count {
            x.val(n(c.count as i64))
        } else {
            String::new()
        };
        if c.index == 0 {
            cond.push_str(&format!(" AND attribute_not_exists({pe})"));
        } else {
            cond.push_str(&format!(
                " AND {pe} = {end} AND {pd} = {} AND {pc} = {count}",
                x.val(n(c.index as i64))
            ));
        }
        let update = match &c.last {
            Some(l) => {
                let (ma, fin) = (x.name("max_arrival"), x.name("finished"));
                let (pm, ph) = (x.name("pending_max_items"), x.name("pending_horizon_ms"));
                format!(
                    "SET {cp} = {end}, {ma} = {}, {fin} = {} REMOVE {pe}, {pd}, {pc}, {pm}, {ph}",
                    x.val(n(l.dedup.max_arrival)),
                    x.val(AttributeValue::Bool(l.shard_finished))
                )
            }
            None => {
                let (pm, ph) = (x.name("pending_max_items"), x.name("pending_horizon_ms"));
                format!(
                    "SET {pe} = {end}, {pd} = {}, {pc} = {count}, {pm} = {}, {ph} = {}",
                    x.val(n(c.index as i64 + 1)),
                    x.val(n(c.shape.max_items as i64)),
                    x.val(n(c.shape.horizon_ms))
                )
            }
        };
        items.push(self.fenced_update(fence, x, cond, update)?);
        for it in c.items {
            items.push(self.item_write(it)?);
        }
        if let Some(l) = &c.last {
            let pk = format!("{}#{}", fence.app, fence.shard_id);
            let dedup = Put::builder()
                .table_name(self.table("dedup"))
                .item("pk", s(&pk))
                .item("sk", s(dedup_sk(l.dedup.max_arrival, c.end)))
                .item("max_arrival", n(l.dedup.max_arrival))
                .item("ids", AttributeValue::B(Blob::new(l.dedup.encode_ids())))
                .item("expires_at", n(now_ms() / 1000 + DEDUP_TTL_SECS))
                .build()
                .map_err(|e| PortError::Invalid(e.to_string()))?;
            items.push(TransactWriteItem::builder().put(dedup).build());
            let total = Update::builder()
                .table_name(self.table("counts"))
                .key("pk", s(GLOBAL_PK))
                .key("sk", s(&pk))
                .update_expression("ADD #n :d")
                .expression_attribute_names("#n", "n")
                .expression_attribute_values(":d", n(l.total_delta))
                .build()
                .map_err(|e| PortError::Invalid(e.to_string()))?;
            items.push(TransactWriteItem::builder().update(total).build());
        }
        if items.len() > MAX_TRANSACT_ITEMS {
            return Err(PortError::Invalid(format!(
                "a chunk of {} items exceeds TransactWriteItems' {MAX_TRANSACT_ITEMS}",
                items.len()
            )));
        }
        self.transact((&fence.app, &fence.shard_id), items).await
    }

    async fn commit_gap(&self, g: GapCommit<'_>) -> PortResult<()> {
        let mut x = Expr::default();
        let mut cond = Self::fence_cond(&mut x, g.fence);
        let (cp, pe, fin) = (
            x.name("checkpoint"),
            x.name("pending_end"),
            x.name("finished"),
        );
        cond.push_str(&x.seq_is(&cp, g.start_after));
        cond.push_str(&x.seq_is(&pe, g.pending_end));
        let mut update = format!("SET {fin} = {}", x.val(AttributeValue::Bool(g.finished)));
        if let Some(t) = g.through {
            update.push_str(&format!(", {cp} = {}", x.val(s(t.as_str()))));
        }
        let removed: Vec<String> = [
            "pending_done",
            "pending_count",
            "pending_max_items",
            "pending_horizon_ms",
        ]
        .iter()
        .map(|a| x.name(a))
        .collect();
        update.push_str(&format!(" REMOVE {pe}, {}", removed.join(", ")));
        let items = vec![
            self.fenced_update(g.fence, x, cond, update)?,
            self.item_write(&WriteItem::DeadLetter(g.gap.clone()))?,
        ];
        self.transact((&g.fence.app, &g.fence.shard_id), items)
            .await
    }

    async fn expire_dedup(&self, app: &str, shard_id: &str, before: i64) -> PortResult<u64> {
        self.delete_dedup_below(app, shard_id, before).await
    }

    async fn load_dedup(
        &self,
        app: &str,
        shard_ids: &[String],
        min_arrival: i64,
    ) -> PortResult<Vec<DedupRecord>> {
        let mut out = Vec::new();
        for shard in shard_ids {
            // The key range reads only records within the horizon; the filter keeps records
            // written before sort keys began with their clock out when they are too old.
            let values = HashMap::from([
                (":p".to_owned(), s(format!("{app}#{shard}"))),
                (":lo".to_owned(), s(arrival_key(min_arrival))),
                (":m".to_owned(), n(min_arrival)),
            ]);
            let items = self
                .query_all(
                    "dedup",
                    "pk = :p AND sk >= :lo",
                    values,
                    Some("max_arrival >= :m".into()),
                    None,
                )
                .await?;
            for i in items {
                let ids = i
                    .get("ids")
                    .and_then(|v| v.as_b().ok())
                    .and_then(|b| DedupRecord::decode_ids(b.as_ref()));
                match (ids, get_n(&i, "max_arrival")) {
                    (Some(ids), Some(max_arrival)) => out.push(DedupRecord { max_arrival, ids }),
                    _ => {
                        return Err(PortError::Other(format!(
                            "corrupt dedup record of {app}/{shard} in {}",
                            self.table("dedup")
                        )))
                    }
                }
            }
        }
        Ok(out)
    }

    async fn post_count(&self, post_id: &str, since_ms: Option<i64>) -> PortResult<PostCount> {
        let total = self
            .counts_item(post_id, "T")
            .await?
            .and_then(|i| get_n(&i, "n"))
            .unwrap_or(0);
        let since = match since_ms {
            None => None,
            Some(t) => {
                let plan = since_plan(t);
                let slots = |item: Option<HashMap<String, AttributeValue>>,
                             prefix: char|
                 -> Vec<(u8, i64)> {
                    item.map(|i| {
                        i.iter()
                            .filter_map(|(k, v)| {
                                let slot: u8 = k.strip_prefix(prefix)?.parse().ok()?;
                                Some((slot, v.as_n().ok()?.parse().ok()?))
                            })
                            .collect()
                    })
                    .unwrap_or_default()
                };
                let hour = self
                    .counts_item(post_id, &ItemKind::Hour(plan.hour_key.clone()).sort_key())
                    .await?;
                let day = self
                    .counts_item(post_id, &ItemKind::Day(plan.day_key.clone()).sort_key())
                    .await?;
                let values = HashMap::from([
                    (":p".to_owned(), s(post_id)),
                    (
                        ":lo".to_owned(),
                        s(ItemKind::Day(plan.first_full_day.clone()).sort_key()),
                    ),
                    (":hi".to_owned(), s("D99999999")),
                ]);
                let later = self
                    .query_all(
                        "counts",
                        "pk = :p AND sk BETWEEN :lo AND :hi",
                        values,
                        None,
                        None,
                    )
                    .await?;
                let items = StoredItems {
                    total,
                    hour_slots: slots(hour, 'm'),
                    day_slots: slots(day, 'h'),
                    later_days: later.iter().filter_map(|i| get_n(i, "n")).collect(),
                };
                Some((since_count(&plan, &items), later.len()))
            }
        };
        Ok(PostCount {
            total,
            since: since.map(|(n, _)| n),
            read_units: tally_core::cost::post_count_read_units(
                since.is_some(),
                since.map_or(0, |(_, d)| d),
            ),
        })
    }

    async fn global_total(&self) -> PortResult<i64> {
        let items = self.partition("counts", "pk", GLOBAL_PK).await?;
        Ok(items.iter().filter_map(|i| get_n(i, "n")).sum())
    }

    async fn dead_letters(&self, limit: usize) -> PortResult<Vec<DeadLetter>> {
        let mut out = Vec::new();
        let mut start = None;
        loop {
            let resp = self
                .client
                .scan()
                .table_name(self.table("dead-letters"))
                .set_exclusive_start_key(start.take())
                .send()
                .await
                .map_err(|e| self.err("Scan", "dead-letters", e))?;
            for i in resp.items() {
                if let (Some(shard_id), Some(seq)) = (
                    get_s(i, "shard_id"),
                    get_s(i, "seq").as_deref().and_then(SeqNo::parse),
                ) {
                    out.push(DeadLetter {
                        shard_id,
                        seq,
                        arrival_ms: get_n(i, "arrival_ms").unwrap_or(0),
                        reason: get_s(i, "reason").unwrap_or_default(),
                        data: i
                            .get("data")
                            .and_then(|v| v.as_b().ok())
                            .map(|b| b.as_ref().to_vec())
                            .unwrap_or_default(),
                        size: get_n(i, "size").unwrap_or(0).max(0) as u64,
                    });
                }
            }
            match resp.last_evaluated_key() {
                Some(k) if !k.is_empty() && out.len() < limit => start = Some(k.clone()),
                _ => break,
            }
        }
        out.sort_by(|a, b| {
            (a.arrival_ms, &a.shard_id, &a.seq).cmp(&(b.arrival_ms, &b.shard_id, &b.seq))
        });
        out.truncate(limit);
        Ok(out)
    }

    async fn dead_letter_count(&self) -> PortResult<u64> {
        let mut total = 0u64;
        let mut start = None;
        loop {
            let resp = self
                .client
                .scan()
                .table_name(self.table("dead-letters"))
                .select(Select::Count)
                .set_exclusive_start_key(start.take())
                .send()
                .await
                .map_err(|e| self.err("Scan", "dead-letters", e))?;
            total += resp.count().max(0) as u64;
            match resp.last_evaluated_key() {
                Some(k) if !k.is_empty() => start = Some(k.clone()),
                _ => return Ok(total),
            }
        }
    }
}
