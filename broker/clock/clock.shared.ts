import type { Bus } from '../bus/bus.js';
import type { ClockSink, ClockStatus, ClockTickFrame, MeshClocks } from './clock.js';
import type { LocalClocks } from './clock.local.js';

/**
 * Clock ticks for every node (flag `ha.clock`, first half): the clock runs as on one node, from its
 * persisted row, and each tick also goes over the bus to the other nodes of the mesh, which hand it to
 * their sessions. One leader per mesh (advisory lock, fenced epoch) is the second half, with the HA
 * ownership work; until then two nodes can still both run a mesh's clock, as with the local one.
 */
export class SharedClocks implements MeshClocks {
  constructor(
    private readonly clocks: LocalClocks,
    bus: Bus,
    relay: ClockSink,
  ) {
    bus.on('clock.tick', (meshId, payload) => relay(meshId, payload as unknown as ClockTickFrame));
  }

  /** What the node's own ticks go through: its sessions, then the bus. */
  static sink(bus: Bus, local: ClockSink): ClockSink {
    return (meshId, frame) => {
      local(meshId, frame);
      void bus.publishToMesh(meshId, 'clock.tick', frame as unknown as Record<string, unknown>);
    };
  }

  set(meshId: string, speed: number): Promise<ClockStatus> {
    return this.clocks.set(meshId, speed);
  }

  pause(meshId: string): Promise<ClockStatus> {
    return this.clocks.pause(meshId);
  }

  resume(meshId: string): Promise<ClockStatus> {
    return this.clocks.resume(meshId);
  }

  get(meshId: string): Promise<ClockStatus> {
    return this.clocks.get(meshId);
  }

  meshActive(meshId: string): Promise<void> {
    return this.clocks.meshActive(meshId);
  }

  meshIdle(meshId: string): Promise<void> {
    return this.clocks.meshIdle(meshId);
  }

  running(): string[] {
    return this.clocks.running();
  }

  close(): Promise<void> {
    return this.clocks.close();
  }
}
