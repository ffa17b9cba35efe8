// CUDA user objects in libphos.so (docs/interposer.md "CUDA graphs"):
// cudaUserObjectCreate/Retain/Release and the references graphs and
// executable graphs hold (cudaGraphRetainUserObject). An object's
// destructor runs once its last reference goes — on a thread of its own,
// as CUDA runs it on an internal thread (the app may not call CUDA from it,
// and must not wait for it under a lock the destructor takes).
//
// Locks: the reference count is atomic; the set of live objects has its own
// mutex (user_objects.cc). A UserObjectRefs belongs to one graph or exec and
// is guarded by the graphs' mutex (graphs.cc) like the rest of it.
#pragma once

#include <cuda_runtime_api.h>

#include <map>

namespace phos::client {

/// `obj` is a live user object of this process.
bool IsLiveUserObject(const CUuserObject_st* obj);
void RetainUserObject(CUuserObject_st* obj, unsigned count);
/// Drops `count` references; the last one runs the destructor.
void ReleaseUserObject(CUuserObject_st* obj, unsigned count);

/// The references one graph or executable graph holds. Copying retains
/// them again (a clone, an instantiation); destruction releases them.
class UserObjectRefs {
 public:
  UserObjectRefs() = default;
  UserObjectRefs(const UserObjectRefs& other) { Merge(other); }
  UserObjectRefs& operator=(const UserObjectRefs& other);
  ~UserObjectRefs() { ReleaseAll(); }

  /// Takes `count` references the caller already holds (retained or moved).
  void Add(CUuserObject_st* obj, unsigned count) { refs_[obj] += count; }
  /// Gives back `count` of its references; false (nothing changes) if it
  /// holds fewer.
  bool Release(CUuserObject_st* obj, unsigned count);
  /// Retains every reference `other` holds, into this.
  void Merge(const UserObjectRefs& other);

 private:
  void ReleaseAll();
  std::map<CUuserObject_st*, unsigned> refs_;
};

}  // namespace phos::client
