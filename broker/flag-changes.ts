/**
 * The ledger flags/changes.ts records flag changes in, made of the root's pool: flag_states and the cluster
 * audit chain in one transaction, appended as every audit writer appends (broker/audit/audit.shared.ts).
 * flags/ cannot import these itself; the node and the CLI hand it this.
 */
import { CLUSTER_CHAIN_ID, type FlagChangeLedger } from '../flags/changes.js';
import { appendInTransaction } from './audit/audit.shared.js';
import { inTransaction, type Pool, type PoolClient } from './db/pool.js';

export function flagChangeLedger(pool: Pool): FlagChangeLedger<PoolClient> {
  return {
    inTransaction: (work) => inTransaction(pool, work),
    appendAudit: (client, event) => appendInTransaction(client, CLUSTER_CHAIN_ID, [event]),
  };
}
