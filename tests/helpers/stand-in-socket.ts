import { EventEmitter } from 'node:events';
import { Connection } from '../../broker/connections/connection.js';
import { createLogger } from '../../broker/log.js';

/**
 * A stand-in for ws's WebSocket with only what Connection reads (readyState, bufferedAmount, send, close, the
 * TCP socket under it), for unit tests of Connection's own arithmetic and ordering; the WebSocket tests
 * (tests/integration/abuse-gateway.test.ts, the fuzz test) exercise the real socket.
 */
export class StandInSocket {
  readonly OPEN = 1;
  readonly CLOSING = 2;
  readonly CLOSED = 3;
  readyState = 1;
  bufferedAmount = 0;
  sent: string[] = [];
  closed: { code: number; reason: string } | undefined;
  readonly _socket = Object.assign(new EventEmitter(), { cork() {}, uncork() {} });
  send(text: string) {
    this.sent.push(text);
  }
  close(code: number, reason: string) {
    this.closed = { code, reason };
    this.readyState = this.CLOSING;
  }
}

/** A Connection over a stand-in socket, as one of `sockets` sharing the node's outbound budget. */
export function standInConnection(sockets = 1): { socket: StandInSocket; connection: Connection } {
  const socket = new StandInSocket();
  const log = createLogger('test', 'silent');
  // biome-ignore lint/suspicious/noExplicitAny: the stand-in has what Connection reads of a WebSocket
  return { socket, connection: new Connection(socket as any, '127.0.0.1', log, () => sockets) };
}
