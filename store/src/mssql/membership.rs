//! Dispatcher membership on SQL Server: heartbeat, leave, list, on the database clock.

use super::*;
use crate::membership::{FORGET_GONE_AFTER, InstanceBeat, InstanceRow};

const INSTANCE_HEARTBEAT: &str = include_str!("../../sql/mssql/instance_heartbeat.sql");
const INSTANCE_LEAVE: &str = include_str!("../../sql/mssql/instance_leave.sql");
const INSTANCE_LIST: &str = include_str!("../../sql/mssql/instance_list.sql");

impl MsStore {
    pub(crate) async fn instance_heartbeat(&self, beat: &InstanceBeat) -> Result<(), Error> {
        self.execute(
            Stmt::new(INSTANCE_HEARTBEAT)
                .bind(beat.instance_id)
                .bind(beat.host.as_str())
                .bind(i64::from(beat.pid))
                .bind(beat.ttl_ms())
                .bind(beat.partitions as i32)
                .bind(beat.led as i32),
        )
        .await
    }

    pub(crate) async fn instance_leave(&self, instance_id: Option<Uuid>) -> Result<u64, Error> {
        self.affected(
            Stmt::new(INSTANCE_LEAVE)
                .bind(instance_id)
                .bind(FORGET_GONE_AFTER.as_millis() as i64),
        )
        .await
    }

    pub(crate) async fn instance_list(&self) -> Result<Vec<InstanceRow>, Error> {
        let rows = self.fetch_all(Stmt::new(INSTANCE_LIST)).await?;
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
