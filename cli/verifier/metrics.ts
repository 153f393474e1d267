/**
 * The verifier's own /metrics (it is not a broker: its registry holds only what it found). Series carry
 * `node` (the verifier's id) like every broker series, and `mesh`.
 */
import { createServer, type Server } from 'node:http';
import { Counter, Gauge, Registry } from 'prom-client';

export class VerifierMetrics {
  readonly registry = new Registry();

  readonly verifiedSeq = new Gauge({
    name: 'mesh_broker_audit_verifier_verified_seq',
    help: 'The seq of the last audit chain row the independent verifier checked, per mesh (never goes back: rows deleted below it show in checkpoint_broken)',
    labelNames: ['mesh'],
    registers: [this.registry],
  });

  readonly lagRows = new Gauge({
    name: 'mesh_broker_audit_verifier_lag_rows',
    help: 'Audit chain rows of the mesh waiting to be verified, after the last pass: the head seq minus the verified seq (a pass reads at most 10000 rows per mesh)',
    labelNames: ['mesh'],
    registers: [this.registry],
  });

  readonly breaks = new Gauge({
    name: 'mesh_broker_audit_verifier_breaks',
    help: 'Rows of the mesh whose hash or link does not hold, as found so far, plus 1 while its chain no longer holds the checkpoint',
    labelNames: ['mesh'],
    registers: [this.registry],
  });

  readonly checkpointBroken = new Gauge({
    name: 'mesh_broker_audit_verifier_checkpoint_broken',
    help: '1 while the chain of the mesh is shorter than, or diverges from, the verifier checkpoint (rows deleted or rewritten), else 0',
    labelNames: ['mesh'],
    registers: [this.registry],
  });

  readonly checkpointSeq = new Gauge({
    name: 'mesh_broker_audit_verifier_checkpoint_seq',
    help: 'The seq of the row the verifier checkpoint holds for the mesh (it never goes back)',
    labelNames: ['mesh'],
    registers: [this.registry],
  });

  readonly checkpointWriteFailures = new Counter({
    name: 'mesh_broker_audit_verifier_checkpoint_write_failures_total',
    help: 'Failed writes of the checkpoint file (retried after the next pass)',
    registers: [this.registry],
  });

  readonly forks = new Gauge({
    name: 'mesh_broker_audit_verifier_forks',
    help: 'Extra rows at an already taken seq of the mesh (each is one fork branch)',
    labelNames: ['mesh'],
    registers: [this.registry],
  });

  /**
   * The gauge above says how forked a chain is; this says when a fork was found, which is what an alert
   * needs: forks written by design in phases 0-2 stay in the chain (and the gauge) for ever. Counted once
   * per fork: not again by a restart (the count goes on from audit_verifier_progress) nor by a rescan that
   * finds the forks already known.
   */
  readonly forksFound = new Counter({
    name: 'mesh_broker_audit_verifier_forks_found_total',
    help: 'Forks of the mesh found by this verifier process that it did not know before (not counted again on restart or rescan)',
    labelNames: ['mesh'],
    registers: [this.registry],
  });

  readonly passes = new Counter({
    name: 'mesh_broker_audit_verifier_passes_total',
    help: 'Verification passes, by kind (incremental: new rows only; rescan: every row from genesis)',
    labelNames: ['kind'],
    registers: [this.registry],
  });

  readonly dbUp = new Gauge({
    name: 'mesh_broker_audit_verifier_db_up',
    help: '1 when the last pass reached Postgres',
    registers: [this.registry],
  });

  constructor(nodeId: string) {
    this.registry.setDefaultLabels({ node: nodeId });
    for (const kind of ['incremental', 'rescan']) this.passes.inc({ kind }, 0);
    this.checkpointWriteFailures.inc(0);
  }

  /** GET /metrics (and /health, for compose health checks). */
  serve(host: string, port: number): Promise<Server> {
    const server = createServer((request, response) => {
      if (request.method === 'GET' && request.url === '/metrics') {
        this.registry.metrics().then(
          (text) => response.writeHead(200, { 'content-type': this.registry.contentType }).end(text),
          (error: Error) => response.writeHead(500).end(error.message),
        );
        return;
      }
      if (request.method === 'GET' && request.url === '/health') {
        response.writeHead(200, { 'content-type': 'application/json' }).end('{"status":"ok"}');
        return;
      }
      response.writeHead(404).end();
    });
    return new Promise((resolve, reject) => {
      server.once('error', reject);
      server.listen(port, host, () => resolve(server));
    });
  }
}
