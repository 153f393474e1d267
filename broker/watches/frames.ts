import { ProtocolError } from '../../protocol/errors.js';
import type { WatchInfo } from '../../protocol/frames.js';
import { watchCreateFrame, watchDeleteFrame, watchListFrame } from '../../protocol/requests.js';
import type { FrameRoutes } from '../../protocol/routes.js';
import type { AuditLog } from '../audit/audit.js';
import type { ListReads } from '../regions/regions.js';
import { BadTargetError, checkTarget, ForbiddenTargetError } from './address-guard.js';
import { parseNotifyOn, validateExtract } from './fetch-value.js';
import { boundedValue } from './notification.js';
import type { WatchRunner } from './runner.js';
import type { Watch, WatchLimits, WatchStore } from './store.js';

export interface WatchFramesOptions {
  store: WatchStore;
  /** Where `watch.list` reads (the regions row); default the store's pool. */
  lists?: ListReads;
  runner: WatchRunner;
  audit: AuditLog;
  nodeId: string;
  limits: WatchLimits;
  allowPrivate: boolean;
}

/**
 * The most of a last value `watch.list` echoes whole: a value can be WATCH_MAX_BYTES (1 MiB), so a list of
 * a member's watches could be tens of MiB; a longer value is listed in its digest form (sha256, size and
 * this much excerpt), as in a notification.
 */
export const LIST_VALUE_MAX_BYTES = 4096;

function view(watch: Watch): WatchInfo {
  return {
    watchId: watch.watchId,
    url: watch.url,
    mode: watch.mode,
    extract: watch.extract,
    intervalSec: watch.intervalSec,
    notifyOn: watch.notifyOn,
    lastValue: watch.lastValue === null ? null : boundedValue(watch.lastValue, LIST_VALUE_MAX_BYTES),
    lastCheckedAt: watch.lastCheckedAt?.toISOString() ?? null,
    lastError: watch.lastError,
    createdAt: watch.createdAt.toISOString(),
  };
}

/** The URL watch frames (docs/protocol.md § URL watches). */
export function registerWatchFrames(router: FrameRoutes, options: WatchFramesOptions): void {
  const { store, audit } = options;

  router.on('watch.create', watchCreateFrame, async (frame, { identity }) => {
    if (frame.extract !== undefined) {
      if (frame.mode !== 'json') throw new ProtocolError('bad_request', '"extract" goes with mode "json"');
      const problem = validateExtract(frame.extract);
      if (problem) throw new ProtocolError('bad_request', `field "extract" ${problem}`);
    }
    let notifyOn: string;
    try {
      const rule = parseNotifyOn(frame.notifyOn);
      notifyOn = rule.kind === 'change' ? 'change' : `${rule.kind}:${rule.value}`;
    } catch (error) {
      throw new ProtocolError('bad_request', `field "notifyOn" ${(error as Error).message}`);
    }
    try {
      await checkTarget(frame.url, { allowPrivate: options.allowPrivate });
    } catch (error) {
      if (error instanceof ForbiddenTargetError) throw new ProtocolError('forbidden', error.message);
      if (error instanceof BadTargetError)
        throw new ProtocolError('bad_request', `field "url" ${error.message}`);
      throw error;
    }
    const watch = await store.create(
      {
        meshId: identity.meshId,
        memberId: identity.memberId,
        sessionId: identity.sessionId,
        url: frame.url,
        mode: frame.mode,
        extract: frame.extract ?? null,
        intervalSec: frame.intervalSec,
        notifyOn,
        ownerNode: options.nodeId,
      },
      options.limits,
    );
    options.runner.created(watch);
    audit.record({
      meshId: identity.meshId,
      eventType: 'watch.created',
      actor: identity.pubkey,
      payload: { watchId: watch.watchId, url: frame.url, mode: frame.mode, intervalSec: frame.intervalSec },
    });
    return { type: 'watch.created', watchId: watch.watchId };
  });

  router.on('watch.delete', watchDeleteFrame, async (frame, { identity }) => {
    await store.delete(identity.meshId, identity.memberId, frame.watchId);
    options.runner.deleted(frame.watchId);
    audit.record({
      meshId: identity.meshId,
      eventType: 'watch.deleted',
      actor: identity.pubkey,
      payload: { watchId: frame.watchId },
    });
    return { type: 'watch.deleted', watchId: frame.watchId };
  });

  router.on('watch.list', watchListFrame, async (_frame, { identity }) => ({
    type: 'watch.list_result',
    watches: (await store.list(identity.meshId, identity.memberId, options.lists)).map(view),
  }));
}
