export {
  ThreadlineClient,
  defaultCommand,
  textInput,
  type ClientTool,
  type CloseOptions,
  type Diagnostic,
  type MethodHandler,
  type Notification,
  type RequestOptions,
  type RequestParams,
  type RequestResult,
  type IncomingServerRequest,
  type ServerRequestContext,
  type ServerRequestHandler,
  type ServerRequestParams,
  type ServerRequestResult,
  type ThreadItem,
  type ThreadlineClientOptions,
  type ToolResult,
  type TurnHandle,
  type TurnOptions,
  type TurnResult,
} from "./client.js";
export { JsonRpcError, ThreadlineExitedError, ThreadlineTimeoutError, type ExitInfo } from "./errors.js";
export { LineSplitter } from "./framing.js";
export * from "./generated/protocol.js";
