import { randomUUID } from 'node:crypto';
import { type MemberKeys, signHello } from '@mesh-broker/sdk';
import type { TestMesh } from './mesh.js';
import { RawSocket } from './raw.js';

/** A signed hello frame as a well-behaved peer would send it; `at` lets a test forge time or nonce. */
export function helloFrame(
  mesh: TestMesh,
  member: MemberKeys,
  options: { sessionId?: string; ts?: number; nonce?: string; name?: string; groups?: string[] } = {},
) {
  const sessionId = options.sessionId ?? randomUUID();
  return {
    type: 'hello',
    v: 1,
    ...signHello(member, mesh.meshId, sessionId, { ts: options.ts, nonce: options.nonce }),
    ...(options.name === undefined ? {} : { name: options.name }),
    ...(options.groups === undefined ? {} : { groups: options.groups }),
  };
}

/** A raw socket that has said hello and got its welcome. */
export async function rawSession(wsUrl: string, hello: object): Promise<RawSocket> {
  const socket = await RawSocket.open(wsUrl);
  socket.send(hello);
  await socket.next((frame) => frame.type === 'welcome');
  return socket;
}
