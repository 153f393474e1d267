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
export { generateMemberKeys, type MemberKeys, pubkeyOf, signHello } from './keys.js';
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
