/**
 * Contract of `Delivery` (broker/delivery/delivery.ts), against LocalDelivery (one node, `ha.delivery`
 * off) and SharedDelivery (two nodes, on): every session of each recipient gets a message (duplicates
 * allowed, dropped by the SDK, never less); what cannot be delivered now is owed and goes out at the next
 * hello, on any node, until acked; a sender's order is kept per recipient; and all of it while the flag
 * is flipped there and back twice under traffic.
 */

import type { MeshClient } from '@mesh-broker/sdk';
import { describe, expect, it } from 'vitest';
import type { Message } from '../../protocol/frames.js';
import { waitFor } from '../helpers/wait.js';
import { flipSequence, useWorld, WORLDS_WITH_REDIS_CLUSTER } from './harness.js';

/** The bodies a client gets, after the SDK's dedup, in arrival order. */
function bodies(client: MeshClient): string[] {
  const seen: string[] = [];
  client.on('message', (m: Message) => seen.push(m.body));
  return seen;
}

describe.each(WORLDS_WITH_REDIS_CLUSTER)('Delivery contract, %s', (kind) => {
  const world = useWorld(kind, {
    flag: 'ha.delivery',
    env: { SEND_BURST: '100000', SEND_RATE_PER_MIN: '1000000' },
  });

  it('a direct, broadcast or group message reaches every session of each recipient member, on any node, once after dedup', async () => {
    const mesh = await world.mesh(3);
    const [senderKeys, recipientKeys, otherKeys] = mesh.members;
    const sender = await world.peer(world.a, mesh, senderKeys!);
    const near = await world.peer(world.a, mesh, recipientKeys!);
    // The member's latest hello declares its groups: this one, on the other node.
    const far = await world.peer(world.b, mesh, recipientKeys!, { groups: ['ops'] });
    const other = await world.peer(world.b, mesh, otherKeys!);
    const [atNear, atFar, atOther] = [bodies(near), bodies(far), bodies(other)];
    const dm = await sender.send(recipientKeys!.pubkey, 'dm');
    const all = await sender.send('*', 'everyone');
    const group = await sender.send('@ops', 'ops only');
    expect([dm.recipients, all.recipients, group.recipients]).toEqual([1, 2, 1]);
    await waitFor(() => atNear.length >= 3 && atFar.length >= 3 && atOther.length >= 1, {
      what: 'every recipient session',
    });
    // A later message to the other member: once it arrived, nothing else is on its way there.
    await sender.send(otherKeys!.pubkey, 'marker');
    await waitFor(() => atOther.includes('marker'));
    expect(atNear).toEqual(['dm', 'everyone', 'ops only']);
    expect(atFar).toEqual(['dm', 'everyone', 'ops only']);
    expect(atOther).toEqual(['everyone', 'marker']);
  });

  it('a message that cannot be delivered now is owed: it goes out at the next hello, on any node, until the member acks it', async () => {
    const mesh = await world.mesh(2);
    const [senderKeys, recipientKeys] = mesh.members;
    const sender = await world.peer(world.a, mesh, senderKeys!);
    for (const body of ['one', 'two', 'three']) await sender.send(recipientKeys!.pubkey, body);

    // Connected on B without acking: replayed, oldest first.
    const first = await world.peer(world.b, mesh, recipientKeys!, { autoAck: false });
    const atFirst = bodies(first);
    await waitFor(() => atFirst.length === 3);
    expect(atFirst).toEqual(['one', 'two', 'three']);
    first.close();
    // Still owed: a new session of the member on A gets them again, and acks them (for the member).
    const second = await world.peer(world.a, mesh, recipientKeys!, { autoAck: false });
    const replayed: Message[] = [];
    second.on('message', (m: Message) => replayed.push(m));
    await waitFor(() => replayed.length === 3);
    expect(replayed.map((m) => m.body)).toEqual(['one', 'two', 'three']);
    for (const { messageId } of replayed) {
      expect(await second.request({ type: 'ack', messageId })).toMatchObject({ type: 'acked', messageId });
    }
    second.close();
    const third = await world.peer(world.b, mesh, recipientKeys!);
    const atThird = bodies(third);
    await sender.send(recipientKeys!.pubkey, 'four');
    await waitFor(() => atThird.includes('four'));
    expect(atThird).toEqual(['four']);
  });

  it("keeps one sender's order per recipient, on either node, for pipelined sends", async () => {
    const mesh = await world.mesh(3);
    const [senderKeys, nearKeys, farKeys] = mesh.members;
    const sender = await world.peer(world.a, mesh, senderKeys!);
    const near = await world.peer(world.a, mesh, nearKeys!);
    const far = await world.peer(world.b, mesh, farKeys!);
    const [atNear, atFar] = [bodies(near), bodies(far)];
    const count = 60;
    await Promise.all(
      Array.from({ length: count }, (_, i) =>
        Promise.all([sender.send(nearKeys!.pubkey, String(i)), sender.send(farKeys!.pubkey, String(i))]),
      ),
    );
    await waitFor(() => atNear.length === count && atFar.length === count, { timeoutMs: 10_000 });
    const inOrder = Array.from({ length: count }, (_, i) => String(i));
    expect(atNear).toEqual(inOrder);
    expect(atFar).toEqual(inOrder);
  });

  it('flips ha.delivery there and back twice under traffic: every message reaches each recipient once, in order', async () => {
    const mesh = await world.mesh(3);
    const [senderKeys, nearKeys, farKeys] = mesh.members;
    const sender = await world.peer(world.a, mesh, senderKeys!);
    const near = await world.peer(world.a, mesh, nearKeys!);
    const far = await world.peer(world.b, mesh, farKeys!);
    const [atNear, atFar] = [bodies(near), bodies(far)];
    let sent = 0;
    let sending = true;
    const traffic = (async () => {
      while (sending && sent < 100_000) {
        await Promise.all([
          sender.send(nearKeys!.pubkey, String(sent)),
          sender.send(farKeys!.pubkey, String(sent)),
        ]);
        sent++;
      }
    })();
    for (const target of flipSequence(world)) {
      await world.flip(target);
      // Traffic keeps flowing after the flip: what was sent by now arrives (across nodes where the
      // contract reaches; with the flag off in the cluster, B's recipient waits, owed, for the flag).
      const mark = sent + 5;
      await waitFor(() => sent >= mark && atNear.length >= mark, { what: 'traffic to the near recipient' });
      if (world.crossNode())
        await waitFor(() => atFar.length >= mark, { what: 'traffic to the far recipient' });
    }
    sending = false;
    await traffic;
    await waitFor(() => atNear.length >= sent && atFar.length >= sent, {
      timeoutMs: 15_000,
      what: `${sent} messages to each recipient`,
    });
    const inOrder = Array.from({ length: sent }, (_, i) => String(i));
    expect(atNear).toEqual(inOrder);
    expect(atFar).toEqual(inOrder);
  }, 60_000);
});
