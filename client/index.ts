export { closeIsPermanent } from '../protocol/errors.js';
export type * from '../protocol/frames.js';
export {
  type ClientClosed,
  type ClientEvents,
  MeshClient,
  type MeshClientOptions,
  MeshClosedError,
  MeshRequestError,
} from './client.js';
export { generateMemberKeys, type MemberKeys, pubkeyOf, signHello } from './keys.js';
export { listMcpServers, listStreams } from './lists.js';
