#include "tilus/ir/stmt.h"

namespace tilus {

const char* to_string(ThreadGroupKind k) {
  switch (k) {
    case ThreadGroupKind::ThreadGroup: return "thread_group";
    case ThreadGroupKind::SingleThread: return "single_thread";
    case ThreadGroupKind::SingleWarp: return "single_warp";
    case ThreadGroupKind::WarpGroup: return "warp_group";
  }
  return "?";
}

Stmt make_seq(std::vector<Stmt> stmts, SourceLoc loc) {
  std::vector<Stmt> flat;
  for (auto& s : stmts) {
    if (!s) continue;
    if (auto seq = stmt_as<SeqStmtNode>(s)) {
      for (auto& c : seq->stmts)
        if (c) flat.push_back(c);
    } else {
      flat.push_back(s);
    }
  }
  if (flat.size() == 1) return flat[0];
  return std::make_shared<SeqStmtNode>(std::move(flat), std::move(loc));
}

Stmt make_inst_stmt(Inst inst) { return std::make_shared<InstStmtNode>(std::move(inst)); }

Stmt rebuild_for(const ForStmtNode& n, Stmt body) {
  auto f = std::make_shared<ForStmtNode>(n);
  f->body = body ? std::move(body) : make_seq({});
  return f;
}

Stmt rebuild_for(const ForStmtNode& n, Expr begin, Expr end, Expr step, Stmt body) {
  auto f = std::make_shared<ForStmtNode>(n);
  f->begin = std::move(begin);
  f->end = std::move(end);
  f->step = std::move(step);
  f->body = body ? std::move(body) : make_seq({});
  return f;
}

}  // namespace tilus
