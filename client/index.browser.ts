/**
 * The SDK's browser entry (`@mesh-broker/sdk` under the `browser` condition, or `@mesh-broker/sdk/browser`):
 * the same MeshClient, with the hello signed through WebCrypto Ed25519 (keys.webcrypto.ts) instead of
 * node:crypto. vite.browser.config.ts bundles it into dist/browser/mesh-sdk.js with no Node import left.
 * Key generation and `pubkeyOf` stay Node-only: a browser peer is given its member keys.
 */
export { closeIsPermanent } from '../protocol/errors.js';
export type * from '../protocol/frames.js';
export {
  type ClientEvents,
  type ConnectionState,
  type ConnectOptions,
  MeshClient,
  type MeshClientOptions,
  type StateChange,
} from './client.js';
export type { ClockApi } from './clock.js';
export {
  type ClientClosed,
  type ConnectErrorCode,
  MeshClosedError,
  MeshConnectError,
  MeshRequestError,
} from './errors.js';
export type { HelloFields, MemberKeys } from './keys.js';
export { signHello } from './keys.webcrypto.js';
export { type ListOptions, listMcpServers, listStreams } from './lists.js';
export type { MeshLogger } from './logger.js';
export {
  type McpApi,
  type McpHandler,
  type McpHosted,
  type McpInvocation,
  type McpToolSpec,
  MeshMcpError,
} from './mcp.js';
export type { RetryPolicy } from './retry.js';
export type {
  StreamGap,
  StreamMessage,
  StreamPosition,
  StreamRecovery,
  StreamSubscription,
  StreamsApi,
  SubscribeOptions,
} from './streams.js';
