/**
 * Group-commit figures from the brokers' /metrics (Prometheus text): how many accept and ack transactions
 * a run wrote and their mean size, as the difference of two scrapes. Accepts are written one batch at a
 * time per node, so batches per second also tell how long one took when the node was saturated.
 */
export interface CommitCounters {
  acceptBatches: number;
  acceptRequests: number;
  ackBatches: number;
  ackRequests: number;
}

export interface CommitFigures {
  acceptBatches: number;
  meanAcceptBatch: number;
  ackBatches: number;
  meanAckBatch: number;
}

/** A series' value by its name and `kind` label (other labels, such as `node`, in any order). */
const series = (text: string, name: string, kind: string) => {
  const match = new RegExp(`^${name}\\{[^}]*kind="${kind}"[^}]*\\} ([0-9.e+]+)$`, 'm').exec(text);
  return match ? Number(match[1]) : 0;
};

/** The commit-batch histogram's counts and sums over `urls` (broker base URLs), now. */
export async function commitCounters(urls: string[]): Promise<CommitCounters> {
  const total: CommitCounters = { acceptBatches: 0, acceptRequests: 0, ackBatches: 0, ackRequests: 0 };
  for (const url of urls) {
    const text = await fetch(`${url}/metrics`).then(
      (r) => r.text(),
      () => '',
    );
    total.acceptBatches += series(text, 'mesh_broker_commit_batch_size_count', 'accept');
    total.acceptRequests += series(text, 'mesh_broker_commit_batch_size_sum', 'accept');
    total.ackBatches += series(text, 'mesh_broker_commit_batch_size_count', 'ack');
    total.ackRequests += series(text, 'mesh_broker_commit_batch_size_sum', 'ack');
  }
  return total;
}

export function commitFigures(before: CommitCounters, after: CommitCounters): CommitFigures {
  const accepts = after.acceptBatches - before.acceptBatches;
  const acks = after.ackBatches - before.ackBatches;
  const mean = (requests: number, batches: number) =>
    batches ? Math.round((requests / batches) * 10) / 10 : 0;
  return {
    acceptBatches: accepts,
    meanAcceptBatch: mean(after.acceptRequests - before.acceptRequests, accepts),
    ackBatches: acks,
    meanAckBatch: mean(after.ackRequests - before.ackRequests, acks),
  };
}
