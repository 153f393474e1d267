/**
 * ioredis's own connector with one listener more: a permanent `error` listener on each socket it opens.
 * ioredis listens for a socket's errors with `once`, so a second error on the same socket has no listener
 * and crashes the process (redis/ioredis#962, closed unmerged). TLS makes that happen: a server
 * certificate that fails verification is one error, and the TLS alert that arrives on the dying socket
 * right after it (`ERR_SSL_TLSV1_ALERT_DECODE_ERROR`) is a second. A node with a wrong REDIS_TLS_CA_FILE
 * must stay up and say why (/health shows Redis down), not exit. The first error still reaches ioredis,
 * which closes the socket and reconnects as before; later ones on that socket say nothing new.
 */
import { createRequire } from 'node:module';
import type { AbstractConnector } from 'ioredis';

type ConnectorClass = new (options: unknown) => AbstractConnector;

// The connector ioredis uses without sentinels; the package exports its base class, not this one.
const { default: StandaloneConnector } = createRequire(import.meta.url)(
  'ioredis/built/connectors/StandaloneConnector',
) as { default: ConnectorClass };

export class GuardedConnector extends StandaloneConnector {
  override async connect(emit: Parameters<AbstractConnector['connect']>[0]) {
    // Typed abstract in ioredis's declarations (the class is not exported), so called through the prototype.
    const stream = await StandaloneConnector.prototype.connect.call(this, emit);
    stream.on('error', () => {});
    return stream;
  }
}
