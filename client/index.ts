export type * from '../protocol/frames.js';
export { type ClientEvents, MeshClient, type MeshClientOptions, MeshRequestError } from './client.js';
export { generateMemberKeys, type MemberKeys, pubkeyOf, signHello } from './keys.js';
