//! Dispatcher membership on PostgreSQL: heartbeat, leave, list, on the database clock.

use super::*;
use crate::membership::{FORGET_GONE_AFTER, InstanceBeat, InstanceRow};

const INSTANCE_HEARTBEAT: &str = include_str!("../../sql/postgres/instance_heartbeat.sql");
const INSTANCE_LEAVE: &str = include_str!("../../sql/postgres/instance_leave.sql");
const INSTANCE_LIST: &str = include_str!("../../sql/postgres/instance_list.sql");

impl PgStore {
    pub(crate) async fn instance_heartbeat(&self, beat: &InstanceBeat) -> Result<(), Error> {
        query(INSTANCE_HEARTBEAT)
            .bind(beat.instance_id)
            .bind(&beat.host)
            .bind(i64::from(beat.pid))
            .bind(beat.ttl_ms())
            .bind(beat.partitions as i32)
            .bind(beat.led as i32)
            .execute_on(self)
            .await?;
        Ok(())
    }

    pub(crate) async fn instance_leave(&self, instance_id: Option<Uuid>) -> Result<u64, Error> {
        let done = query(INSTANCE_LEAVE)
            .bind(instance_id)
            .bind(FORGET_GONE_AFTER.as_millis() as i64)
            .execute_on(self)
            .await?;
        Ok(done.rows_affected())
    }

    pub(crate) async fn instance_list(&self) -> Result<Vec<InstanceRow>, Error> {
        let rows = query(INSTANCE_LIST).all_on(self).await?;
        rows.iter()
            .map(|r| {
                Ok(InstanceRow {
                    instance_id: r.col("instance_id")?,
                    host: r.col("host")?,
                    pid: r.col("pid")?,
                    started_at: r.col("started_at")?,
                    partitions: r.col::<i32>("partitions")?.max(0) as u32,
                    led: r.col::<i32>("led")?.max(0) as u32,
                    live: r.col("live")?,
                    heartbeat_age_ms: r.col("heartbeat_age_ms")?,
                })
            })
            .collect()
    }
}
